#!/usr/bin/env python3
"""Per-step wall times of a `brioche train` run, from its OUTPUT/log.jsonl.

Step events carry step_seconds (logs written before it carried only the
cumulative tokens over the run's clock, evaluations included: then the
clock at step k is tokens_k / tokens_per_s_k); eval events carry their
eval_seconds. Prints each step's duration and tokens (and its
step_cpu_seconds, the process's CPU time over the step, all threads, where
the log has it) and the evaluations' times.
"""
import json
import sys

clock, prev_tokens, steps, evals = 0.0, 0, [], []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "eval":
        evals.append(e["eval_seconds"])
    elif e.get("event") == "step":
        if "step_seconds" in e:
            cpu = f", {e['step_cpu_seconds']:.2f} CPU-s" if "step_cpu_seconds" in e else ""
            steps.append((e["step"], e["step_seconds"], e["tokens"] - prev_tokens, cpu))
        else:
            now = e["tokens"] / e["tokens_per_s"]
            steps.append((e["step"], now - clock, e["tokens"] - prev_tokens, " (clock: incl. evals before it)"))
            clock = now
        prev_tokens = e["tokens"]
for step, dt, tokens, note in steps:
    print(f"step {step}: {dt * 1000:.0f} ms{note}, {tokens} tokens")
print("evals (s):", ", ".join(f"{s:.2f}" for s in evals))
