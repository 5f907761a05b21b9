#!/usr/bin/env python3
"""Speculative decoding through HTTP, side by side in one run: `brioche serve`
with and without speculation (one server; the plain runs opt out per request
with "speculative": false) and, with --llama-server, llama.cpp's
llama-server on the same GGUF files without speculation and with its
n-gram (prompt lookup) and draft-model speculation.

  python3 bench/speculative/http_compare.py [--brioche build/cpu/brioche] [--rounds 3] [--threads 2]
      [--workload lookup|schema|all] [--draft | --draft-only] [--target F16.gguf]
      [--llama-server /tmp/llama/build/bin/llama-server]

Workloads (greedy, chat completions): "lookup" is bench/speculative/*.txt
(extraction, editing, a code rename: max_tokens 160), "schema" five
JSON-schema requests as response_format (max_tokens 96; the schemas of
bench/spec_grammar_bench.cpp). Modes: brioche plain / prompt lookup
(--speculative prompt-lookup, adaptive K <= 4); with --draft, plain / draft
model on a second server (-m TARGET --draft-model DRAFT). llama.cpp: a
server per mode (its speculation is chosen at start): plain,
--spec-type ngram-simple (n-gram 3, draft 4: what brioche's lookup matches
at most and drafts), and with --draft -md DRAFT --spec-type draft-simple;
every llama-server with --no-repack, --poll 0 and OMP_WAIT_POLICY=PASSIVE
(why: at `common` below).

Every (server, prompt) pair runs once unmeasured first, so both prefix
caches hold the prompt and the timed requests measure generation. A round
runs every prompt in every mode, the mode order rotating per round; tokens/s
is completion tokens over the request's wall time. Acceptance: brioche's
/metrics counters around each request, llama-server's "timings" (draft_n,
draft_n_accepted). Prints a table of medians per mode and workload and
whether each mode's text equals its engine's plain text.

The default files: the default model (Q4_1) as the target of the lookup
modes; with --draft, --target (default: an F16 copy of it made with
llama-quantize, see below) drafted by the Q4_1 file.

Building the peer (llama.cpp's own tools from the source in PyPI's
llama-cpp-python sdist; nothing goes into the repository):
  mkdir -p /tmp/llama && cd /tmp/llama
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
  tar xzf llama_cpp_python-0.3.36.tar.gz
  cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  ninja -C build -j2 llama-server llama-quantize
  # the F16 target for --draft (dequantized Q4_1: the same weights, 3.6x the bytes):
  build/bin/llama-quantize --allow-requantize ~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf \
    /tmp/llama/SmolLM2-135M-Instruct.F16.gguf F16
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")

SCHEMA_TASKS = [
    ("person", "Extract the person as JSON with the fields name, born, city and occupation: Alan Turing was born in "
     "1912 in London and worked as a mathematician.",
     {"type": "object", "properties": {"name": {"type": "string", "maxLength": 32},
                                       "born": {"type": "integer", "minimum": 0, "maximum": 2100},
                                       "city": {"type": "string", "maxLength": 32},
                                       "occupation": {"type": "string", "maxLength": 32}},
      "required": ["name", "born", "city", "occupation"], "additionalProperties": False}),
    ("fruits", "List three fruits and their colors as a JSON array of objects with name and color.",
     {"type": "array", "minItems": 3, "maxItems": 3,
      "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                                 "color": {"type": "string", "maxLength": 16}},
                "required": ["name", "color"], "additionalProperties": False}}),
    ("laptop", "Describe a laptop for sale as JSON with brand, model, price in dollars, whether it is in stock, and "
     "a list of up to three features.",
     {"type": "object", "properties": {"brand": {"type": "string", "maxLength": 20},
                                       "model": {"type": "string", "maxLength": 20}, "price": {"type": "number"},
                                       "in_stock": {"type": "boolean"},
                                       "features": {"type": "array", "maxItems": 3,
                                                    "items": {"type": "string", "maxLength": 30}}},
      "required": ["brand", "model", "price", "in_stock", "features"], "additionalProperties": False}),
    ("weather", "What is the weather like in Paris in spring? Answer as JSON.",
     {"type": "object", "properties": {"sky": {"enum": ["clear", "cloudy", "rain", "snow"]},
                                       "temp_c": {"type": "integer", "minimum": -50, "maximum": 60},
                                       "wind": {"enum": ["calm", "breeze", "gale"]},
                                       "humidity_pct": {"type": "integer", "minimum": 0, "maximum": 100}},
      "required": ["sky", "temp_c", "wind", "humidity_pct"], "additionalProperties": False}),
    ("ticket", "File a support ticket as JSON: the user cannot log in after resetting their password.",
     {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                       "priority": {"enum": ["P1", "P2", "P3"]},
                                       "component": {"enum": ["auth", "billing", "ui", "api"]},
                                       "summary": {"type": "string", "maxLength": 60}},
      "required": ["id", "priority", "component", "summary"], "additionalProperties": False}),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get_text(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


STARTED = []  # every server started, stopped on the way out (a failed start included)


class Server:
    def __init__(self, name, argv, kind):
        port = free_port()
        self.name, self.kind = name, kind
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(f"/tmp/http_compare.{name}.log", "w")
        self.proc = subprocess.Popen(argv + ["--port", str(port)], stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        STARTED.append(self)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited at start; see {self.log.name}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError(f"{name} did not start")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)

    def spec_counters(self):
        if self.kind != "brioche":
            return (0, 0, 0)
        values = {}
        for line in get_text(self.url + "/metrics").splitlines():
            if line.startswith("brioche_spec_") and " " in line:
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return (values.get("brioche_spec_draft_tokens_total", 0), values.get("brioche_spec_accepted_tokens_total", 0),
                values.get("brioche_spec_verify_steps_total", 0))


def request_body(task, max_tokens):
    name, prompt, schema = task
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens,
            "seed": 1}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    return body


def run_one(server, extra, task, max_tokens):
    body = request_body(task, max_tokens)
    body.update(extra)
    before = server.spec_counters()
    t0 = time.perf_counter()
    reply = post(server.url + "/v1/chat/completions", body)
    wall = time.perf_counter() - t0
    after = server.spec_counters()
    tokens = reply["usage"]["completion_tokens"]
    timings = reply.get("timings", {})
    if server.kind == "brioche":
        drafts, accepted, steps = (a - b for a, b in zip(after, before))
    else:
        drafts, accepted, steps = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0), 0
    return {"text": reply["choices"][0]["message"].get("content") or "", "tokens": tokens, "wall": wall,
            "drafts": drafts, "accepted": accepted, "steps": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", default="build/cpu/brioche")
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--draft", action="store_true", help="also the draft-model modes")
    ap.add_argument("--draft-only", action="store_true", help="only the draft-model modes")
    ap.add_argument("--target", default="/tmp/llama/SmolLM2-135M-Instruct.F16.gguf",
                    help="target of the draft-model modes (drafted by --model)")
    ap.add_argument("--workload", default="all", choices=["lookup", "schema", "all"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec-tokens", type=int, default=4)
    args = ap.parse_args()

    tasks = []  # (workload, task, max_tokens)
    if args.workload in ("lookup", "all"):
        for name in ("extract", "edit", "code"):
            with open(os.path.join(HERE, name + ".txt")) as f:
                tasks.append(("lookup", (name, f.read().strip(), None), 160))
    if args.workload in ("schema", "all"):
        tasks += [("schema", t, 96) for t in SCHEMA_TASKS]

    t = str(args.threads)
    k = str(args.spec_tokens)
    servers, modes = [], []  # modes: (label, server, extra body, plain label of its engine)
    args.draft = args.draft or args.draft_only
    if not args.draft_only:
        b = Server("brioche", [args.brioche, "serve", "-m", args.model, "-t", t, "--speculative", "prompt-lookup",
                               "--spec-tokens", k], "brioche")
        servers.append(b)
        modes += [("brioche plain", b, {"speculative": False}, "brioche plain"),
                  ("brioche prompt lookup", b, {}, "brioche plain")]
    if args.draft:
        bd = Server("brioche-draft", [args.brioche, "serve", "-m", args.target, "--draft-model", args.model,
                                      "-t", t, "--spec-tokens", k], "brioche")
        servers.append(bd)
        modes += [("brioche plain (target)", bd, {"speculative": False}, "brioche plain (target)"),
                  ("brioche draft model", bd, {}, "brioche plain (target)")]
    if args.llama_server:
        # --no-repack: on the dev machine llama.cpp's AMX path (the only
        # repacked layout of Q4_1 and F16) faults at its first tile load
        # (SIGSEGV in ggml_backend_amx_mul_mat, ldtilecfg), so it runs on
        # its plain AVX-512 kernels.
        # --poll 0 and OMP_WAIT_POLICY=PASSIVE: its worker threads sleep
        # instead of spinning at each op's barrier; on the shared 2-core
        # machine under load 13-15, spinning made it decode at 0.57 tok/s
        # (14.3 passive, the extraction prompt).
        common = ["-t", t, "-tb", t, "-c", "4096", "-np", "1", "--no-webui", "--no-repack", "--poll", "0"]
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        if not args.draft_only:
            lp = Server("llama-plain", [args.llama_server, "-m", args.model, *common], "llama")
            ll = Server("llama-ngram", [args.llama_server, "-m", args.model, *common, "--spec-type", "ngram-simple",
                                        "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", k], "llama")
            servers += [lp, ll]
            modes += [("llama.cpp plain", lp, {}, "llama.cpp plain"),
                      ("llama.cpp ngram-simple", ll, {}, "llama.cpp plain")]
        if args.draft:
            ldp = Server("llama-target", [args.llama_server, "-m", args.target, *common], "llama")
            # -md alone loads the draft but leaves --spec-type at none.
            ld = Server("llama-draft", [args.llama_server, "-m", args.target, "-md", args.model, *common,
                                        "--spec-type", "draft-simple", "--spec-draft-n-max", k,
                                        "--spec-draft-n-min", "0"], "llama")
            servers += [ldp, ld]
            modes += [("llama.cpp plain (target)", ldp, {}, "llama.cpp plain (target)"),
                      ("llama.cpp draft model", ld, {}, "llama.cpp plain (target)")]

    load = open("/proc/loadavg").read().split()[:3]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, commit {commit}, threads {t}, "
          f"rounds {args.rounds}, load at start {' '.join(load)}", flush=True)
    try:
        for _, task, max_tokens in tasks:  # warm-up: prompts into every prefix cache
            for _, server, extra, _ in modes:
                run_one(server, extra, task, max_tokens)
        results = {}  # (workload, mode) -> list of per-round (tokens, wall, drafts, accepted)
        texts = {}  # (task name, mode) -> set of texts
        for r in range(args.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for workload, task, max_tokens in tasks:
                for label, server, extra, _ in order:
                    out = run_one(server, extra, task, max_tokens)
                    results.setdefault((workload, label, task[0]), []).append(out)
                    texts.setdefault((task[0], label), set()).add(out["text"])
                    print(f"round {r + 1} {task[0]:8s} {label:26s} {out['tokens']:4d} tokens "
                          f"{out['tokens'] / out['wall']:7.2f} tok/s drafts {out['drafts']:.0f} "
                          f"accepted {out['accepted']:.0f}", flush=True)
        print(f"# load at end {' '.join(open('/proc/loadavg').read().split()[:3])}")
        print()
        print("| workload | prompt | mode | median tok/s | min-max tok/s | vs its plain | accepted | same text |")
        print("|---|---|---|---|---|---|---|---|")
        medians = {}
        for workload, task, _ in tasks:
            for label, _, _, plain in modes:
                runs = results[(workload, label, task[0])]
                rates = [o["tokens"] / o["wall"] for o in runs]
                medians[(task[0], label)] = statistics.median(rates)
        for workload, task, _ in tasks:
            for label, _, _, plain in modes:
                runs = results[(workload, label, task[0])]
                rates = [o["tokens"] / o["wall"] for o in runs]
                drafts = sum(o["drafts"] for o in runs)
                accepted = sum(o["accepted"] for o in runs)
                acc = f"{100 * accepted / drafts:.1f}% of {drafts / len(runs):.0f}" if drafts else "-"
                same = "yes" if texts[(task[0], label)] == texts[(task[0], plain)] else "no"
                print(f"| {workload} | {task[0]} | {label} | {statistics.median(rates):.2f} | "
                      f"{min(rates):.2f}-{max(rates):.2f} | {medians[(task[0], label)] / medians[(task[0], plain)]:.2f}x"
                      f" | {acc} | {same} |")
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    try:
        main()
    finally:
        for server in STARTED:
            server.stop()
