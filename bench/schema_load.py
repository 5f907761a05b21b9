#!/usr/bin/env python3
"""Throughput of schema-constrained requests against the same requests
without a schema, through one running `brioche serve` (issue 50's GPU check).

Each round sends N concurrent chat requests of T tokens twice, without and
with a strict two-field JSON schema, alternating which goes first. The schema's
string has a minLength no T-token answer reaches, so every constrained request
decodes exactly T tokens (as `ignore_eos` makes the free ones do) and both sides
decode the same number of tokens.

Run: python3 bench/schema_load.py --port 8090 [--clients 64] [--tokens 60] [--rounds 3]
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.error
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 2000}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def one(port, i, tokens, constrained):
    body = {"messages": [{"role": "user", "content": f"Describe person {i} as JSON."}], "max_tokens": tokens,
            "temperature": 1.0, "seed": i, "ignore_eos": True}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    for attempt in range(100):
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                out = json.loads(r.read())
            break
        except urllib.error.HTTPError as e:  # 429: more preparations at once than the server takes; retry, as
            if e.code != 429 or attempt == 99:  # the openai client does
                raise
            time.sleep(0.05)
    text = out["choices"][0]["message"]["content"] or ""
    if constrained and not (text.startswith("{") and '"name"' in text):
        raise SystemExit(f"constrained request {i} did not follow the schema: {text[:80]!r}")
    return out["usage"]["completion_tokens"]


def batch(port, clients, tokens, constrained):
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        n = sum(pool.map(lambda i: one(port, i, tokens, constrained), range(clients)))
    return n, n / (time.time() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    batch(a.port, a.clients, a.tokens, True)  # warm-up: compiles the schema, fills the caches
    batch(a.port, a.clients, a.tokens, False)
    rates = {False: [], True: []}
    for r in range(a.rounds):
        for constrained in ([False, True] if r % 2 == 0 else [True, False]):
            n, rate = batch(a.port, a.clients, a.tokens, constrained)
            rates[constrained].append(rate)
            print(f"round {r + 1} {'schema   ' if constrained else 'no schema'}: {n} tokens, {rate:,.0f} tok/s",
                  flush=True)
    free, bound = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: no schema {free:,.0f} tok/s, schema {bound:,.0f} tok/s = {100 * bound / free:.1f}%")


if __name__ == "__main__":
    main()
