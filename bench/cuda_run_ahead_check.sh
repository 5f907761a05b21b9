#!/bin/bash
# Decode steps run one ahead of the host (docs/cuda.md), end to end through
# the CLI and the HTTP server, on the GPU machine:
#
#   BIN=build/dev/brioche MODEL=/tmp/smol.gguf bash bench/cuda_run_ahead_check.sh
#
# MODEL: e.g. `gen_model --shape smollm2-135m --dtype bf16 --tokenizer-from
# smollm2-tokenizer.gguf --out /tmp/smol.gguf` (bench/pack_common.sh packs the
# tokenizer). Checks, each printing "ok" or failing the script:
#   1. `brioche run`, greedy: the same text with BRIOCHE_RUN_AHEAD=0 and 1;
#   2. `brioche serve`: 8 streaming chat completions at once and a client
#      that hangs up after its first chunk, then one more request and four
#      with a JSON schema: every answer complete, the JSON valid under the
#      schema, /metrics counting steps run ahead.
set -euo pipefail
BIN=${BIN:-build/cuda/brioche}
MODEL=${MODEL:?set MODEL to a GGUF file}
PORT=${PORT:-18731}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of the checks (nothing runs ahead there)

prompt="Write a haiku about bread."
on=$(BRIOCHE_RUN_AHEAD=1 "$BIN" run -m "$MODEL" --device "$DEVICE" -n 64 --temp 0 --ignore-eos -p "$prompt" 2>/dev/null)
off=$(BRIOCHE_RUN_AHEAD=0 "$BIN" run -m "$MODEL" --device "$DEVICE" -n 64 --temp 0 --ignore-eos -p "$prompt" 2>/dev/null)
[ "$on" == "$off" ] || { echo "run: texts differ"; printf '%s\n---\n%s\n' "$on" "$off"; exit 1; }
echo "ok: brioche run gives the same 64 greedy tokens run ahead and waiting (${#on} bytes)"

"$BIN" serve -m "$MODEL" --device "$DEVICE" --port "$PORT" > /tmp/run_ahead_serve.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
python3 - "$PORT" "$DEVICE" <<'EOF'
import http.client, json, sys, threading, time

port = int(sys.argv[1])
for _ in range(600):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("server did not come up")

def chat(i, hang_up=False):
    body = {"messages": [{"role": "user", "content": f"Tell me a story about the number {i}."}],
            "max_tokens": 48, "temperature": 0.8, "seed": i, "stream": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    chunks, finish = 0, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        event = json.loads(line[6:])
        chunks += 1
        if hang_up:
            c.sock.close()  # the client goes away mid-stream
            return ("hung up", chunks)
        for choice in event.get("choices", []):
            finish = choice.get("finish_reason") or finish
    return (finish, chunks)

results = [None] * 9
def run(i):
    results[i] = chat(i, hang_up=(i == 8))
threads = [threading.Thread(target=run, args=(i,)) for i in range(9)]
for t in threads: t.start()
for t in threads: t.join()
for i, (finish, chunks) in enumerate(results[:8]):
    assert finish in ("length", "stop"), (i, finish)
    assert chunks > 1, (i, chunks)
after = chat(100)
assert after[0] in ("length", "stop"), after

# Structured output run ahead: every step's grammar mask needs the host's
# last token, which it has by the time that step's sampling is launched.
schema = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Lyon", "Nice"]},
    "sunny": {"type": "boolean"},
    "rank": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["city", "sunny", "rank"], "additionalProperties": False}
for seed in range(4):
    body = {"messages": [{"role": "user", "content": "Pick a city."}], "max_tokens": 200, "temperature": 1.0,
            "seed": seed, "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "city", "schema": schema, "strict": True}}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    answer = json.loads(r.read())
    assert r.status == 200, answer
    value = json.loads(answer["choices"][0]["message"]["content"])
    assert value["city"] in ("Paris", "Lyon", "Nice") and isinstance(value["sunny"], bool) and 1 <= value["rank"] <= 9, value
print("ok: 4 json_schema answers parse and match the schema")
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
c.request("GET", "/metrics")
metrics = c.getresponse().read().decode()
overlapped = [l for l in metrics.splitlines() if l.startswith("brioche_engine_overlapped_steps_total")]
steps = [l for l in metrics.splitlines() if l.startswith("brioche_engine_steps_total")]
assert overlapped and (float(overlapped[0].split()[-1]) > 0 or sys.argv[2] != "cuda"), overlapped
print(f"ok: serve answered 8 streams at once, a client that hung up, then one more; {overlapped[0]} of {steps[0]}")
EOF
