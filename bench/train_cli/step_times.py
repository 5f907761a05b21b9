#!/usr/bin/env python3
"""Per-step wall times of a `brioche train` run, from its OUTPUT/log.jsonl.

Step events carry the cumulative tokens and tokens/s since the run started
(evaluations included), so the run's clock at step k is tokens_k / tps_k;
eval events carry their own eval_seconds. Prints each step's duration and
tokens, the evaluations' times, and the mean step time without the first.
"""
import json
import sys

clock, prev_tokens, steps, evals = 0.0, 0, [], []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "eval":
        evals.append(e["eval_seconds"])
    elif e.get("event") == "step":
        now = e["tokens"] / e["tokens_per_s"]
        steps.append((e["step"], now - clock, e["tokens"] - prev_tokens))
        clock, prev_tokens = now, e["tokens"]
for step, dt, tokens in steps:
    print(f"step {step}: {dt * 1000:.0f} ms (clock incl. evals before it), {tokens} tokens")
print("evals (s):", ", ".join(f"{s:.2f}" for s in evals))
