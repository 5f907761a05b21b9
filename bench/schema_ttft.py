#!/usr/bin/env python3
"""Schema compile time as a user sees it: time to first token of a streamed
request through `brioche serve` carrying a JSON schema the server has not
seen before, minus the time to first token of the same request without a
schema (the difference is the schema's conversion and mask compile; the
server prewarms the shared JSON rules once per tokenizer at start).

The server keeps compiled grammars (keyed by the grammar, so annotations
such as "$comment" do not make a schema new): each schema is measured once
per server process. To repeat, or to compare two builds, start a fresh
server for each run and alternate them. The process-wide mask cache keeps
what earlier schemas of the run computed, as in a real server. Schemas
come from the repository corpus (bench/schema_corpus/corpus.json.zst) by
index; they are sent as non-strict `json_schema` (JSON Schema's reading,
what bench/schema_corpus.py measures).

Run: python3 bench/schema_ttft.py --url http://127.0.0.1:8080 [--schemas 1,63,169]
"""
import argparse
import json
import os
import statistics
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROMPT = "Write one example document as JSON:"


def corpus(path):
    text = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout.decode()
    return json.loads(text)["schemas"]


def first_token_seconds(url, extra):
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "stream": True, **extra}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    return time.perf_counter() - start
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "bench/schema_corpus/corpus.json.zst"))
    ap.add_argument("--schemas", default="1,63,169,118,8", help="corpus indices")
    args = ap.parse_args()
    schemas = corpus(args.corpus)
    first_token_seconds(args.url, {})  # warm-up: the first request pays one-time costs
    for index in (int(i) for i in args.schemas.split(",")):
        entry = schemas[index]
        rf = {"response_format": {"type": "json_schema", "json_schema": {"name": "doc", "schema": entry["schema"],
                                                                            "strict": False}}}
        try:
            with_schema = first_token_seconds(args.url, rf)
        except urllib.error.HTTPError as e:
            print(f"{index:4d} {entry['source'][:60]}: HTTP {e.code}: {e.read().decode()[:120]}")
            continue
        plain = statistics.median(first_token_seconds(args.url, {}) for _ in range(3))
        print(f"{index:4d} {entry['source'][:60]:60s} TTFT with schema {with_schema * 1e3:8.1f} ms, "
              f"without {plain * 1e3:6.1f} ms, difference {(with_schema - plain) * 1e3:8.1f} ms", flush=True)


if __name__ == "__main__":
    main()
