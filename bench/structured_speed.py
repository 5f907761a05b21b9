#!/usr/bin/env python3
"""Decode tokens/s with and without a grammar, same prompt, greedy, one request
at a time, through `brioche serve` (streaming: the clock runs from the first
to the last token, so prefill and HTTP setup are excluded).

Run: python3 bench/structured_speed.py --url http://127.0.0.1:8080 [--tokens 128] [--repeats 3]

Constrained cases use grammars that cannot finish before --tokens (minItems),
so both sides decode the same number of tokens; ignore_eos keeps the
unconstrained side going.
"""
import argparse
import json
import statistics
import time
import urllib.request

PROMPT = "Here is a list of people with their names and ages, as JSON:"

LONG_ARRAY = {"type": "array", "minItems": 60, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                     "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"], "additionalProperties": False}}

CASES = {
    "unconstrained": {},
    "json_schema (array of objects)": {"response_format": {"type": "json_schema", "json_schema": {"name": "people", "schema": LONG_ARRAY}}},
    "json_schema compact + jump_forward": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "people", "schema": LONG_ARRAY, "any_whitespace": False}}, "jump_forward": True},
    "json_schema compact": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "people", "schema": LONG_ARRAY, "any_whitespace": False}}},
    "guided_regex [a-z ,.]{400}": {"guided_regex": "[a-z ,.]{400}"},
}


def stream_once(url, extra, tokens):
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    n = 0
    finish = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                if c.get("text"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                finish = c.get("finish_reason") or finish
    return n, (last - first) if first and last else float("nan"), finish


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    stream_once(args.url, {}, 8)  # warm up
    base = None
    for name, extra in CASES.items():
        stream_once(args.url, extra, 8)  # compile (cached afterwards)
        rates = []
        for _ in range(args.repeats):
            n, seconds, finish = stream_once(args.url, extra, args.tokens)
            rates.append((n - 1) / seconds)  # tokens after the first
        rate = statistics.median(rates)
        base = base or rate
        print(f"{name:40s} {rate:7.2f} tok/s  ({rate / base * 100:5.1f}% of unconstrained; last finish={finish}, n={n})")


if __name__ == "__main__":
    main()
