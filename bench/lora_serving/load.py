#!/usr/bin/env python3
"""Adapters against the base model through one `brioche serve` (issue 43):

  aggregate  16 concurrent streams, 2 on each of 8 adapters, against 16 on
             the base alone: generated tokens / wall time (prefill included:
             rows of different adapters share no prompt K/V), and the decode
             rate once every stream has its first token
  batch-1    one stream with one adapter against one on the base: decode
             tokens/s between the first and the last token

An untimed warm-up round runs every load once; then rounds alternate
adapter and base runs, and medians are printed.

  python3 bench/lora_serving/load.py --port 8080 --adapters a0,a1,...,a7 --tokens 128 --rounds 3
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.request


def stream(port, model, i, tokens):
    """One streamed chat completion; returns the arrival time of every token."""
    body = {"messages": [{"role": "user", "content": f"Tell story number {i}."}], "max_tokens": tokens,
            "temperature": 1.0, "seed": i, "ignore_eos": True, "stream": True}
    if model:
        body["model"] = model
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
    return times


def aggregate(port, models, tokens):
    """(whole-load tok/s, decode tok/s from the last first token to the last token)."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:
        streams = list(pool.map(lambda im: stream(port, im[1], im[0], tokens), enumerate(models)))
    end = time.perf_counter()
    window = max(s[0] for s in streams)
    in_window = sum(sum(1 for t in s if t > window) for s in streams)
    return sum(len(s) for s in streams) / (end - start), in_window / (max(s[-1] for s in streams) - window)


def batch1(port, model, tokens):
    times = stream(port, model, 0, tokens)
    return (len(times) - 1) / (times[-1] - times[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--adapters", required=True, help="comma-separated adapter names (8)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-tokens", type=int, default=16, help="tokens a stream of the untimed warm-up round makes")
    p.add_argument("--label", default="")
    a = p.parse_args()
    adapters = a.adapters.split(",")
    spread = [adapters[i % len(adapters)] for i in range(a.streams)]
    # Warm-up, untimed: each load once, so that what a server does once per
    # batch shape (CUDA graph recording, GEMM algorithm timing, adapter
    # uploads) is not in the first round.
    for models in ([""] * a.streams, spread):
        aggregate(a.port, models, a.warmup_tokens)
    batch1(a.port, "", a.warmup_tokens)
    batch1(a.port, adapters[0], a.warmup_tokens)
    runs = {"agg_base": [], "agg_lora": [], "dec_base": [], "dec_lora": [], "b1_base": [], "b1_lora": []}
    for _ in range(a.rounds):
        for key, models in (("base", [""] * a.streams), ("lora", spread)):
            whole, decode = aggregate(a.port, models, a.tokens)
            runs["agg_" + key].append(whole)
            runs["dec_" + key].append(decode)
        runs["b1_base"].append(batch1(a.port, "", a.tokens))
        runs["b1_lora"].append(batch1(a.port, adapters[0], a.tokens))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{a.label} {a.streams} streams x {a.tokens} tokens, {a.rounds} rounds (median; all: "
          + ", ".join(f"{k} {[round(x) for x in v]}" for k, v in runs.items()) + ")")
    print(f"  aggregate: base {med['agg_base']:.0f} tok/s, {len(adapters)} adapters {med['agg_lora']:.0f} tok/s "
          f"= {100 * med['agg_lora'] / med['agg_base']:.1f}% of the base")
    print(f"  decode once all streams run: base {med['dec_base']:.0f} tok/s, adapters {med['dec_lora']:.0f} tok/s "
          f"= {100 * med['dec_lora'] / med['dec_base']:.1f}% of the base")
    print(f"  batch-1 decode: base {med['b1_base']:.1f} tok/s, one adapter {med['b1_lora']:.1f} tok/s "
          f"= {100 * med['b1_lora'] / med['b1_base']:.1f}% of the base")


if __name__ == "__main__":
    main()
