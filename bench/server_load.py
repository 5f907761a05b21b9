#!/usr/bin/env python3
"""Load test for `brioche serve` (loopback only, bounded).

N concurrent streaming clients send R chat requests in total; every stream is
checked (well-formed SSE chunks, exactly one finish_reason per choice, [DONE]
last, usage matching the streamed token count), every request id is counted
once, and p50/p99 time-to-first-token and inter-token latency are printed.
With --idle M it first opens M keep-alive connections that stay idle for the
whole run, checking that new requests are still served while they are held.

  python3 bench/server_load.py --url http://127.0.0.1:8080 --clients 64 --requests 1000 --max-tokens 16
"""
import argparse
import asyncio
import json
import statistics
import sys
import time

import openai


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


async def one_request(client, i, args, stats):
    start = time.perf_counter()
    first = last = None
    itl = []
    ids = set()
    finishes = 0
    usage = None
    stream = await client.chat.completions.create(
        model=args.model, messages=[{"role": "user", "content": f"Request {i}: say something about the number {i}."}],
        max_tokens=args.max_tokens, temperature=0.7, seed=i, stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                now = time.perf_counter()
                if first is None:
                    first = now
                    stats["ttft"].append(now - start)
                else:
                    itl.append(now - last)
                last = now
            if choice.finish_reason:
                finishes += 1
    # The client ends the iteration only at "data: [DONE]".
    if finishes != 1 or len(ids) != 1 or usage is None:
        stats["errors"].append(f"request {i}: finishes={finishes} ids={len(ids)} usage={usage}")
        return
    stats["ids"].append(next(iter(ids)))
    stats["itl"].extend(itl)
    stats["tokens"] += usage.completion_tokens
    stats["completed"] += 1


async def idle_connections(url, count):
    """Opens `count` keep-alive connections that each make one request and then stay idle."""
    host, port = url.replace("http://", "").split(":")
    conns = []
    for _ in range(count):
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n")[0]:
                return conns, f"idle connection got {head[:40]!r}"
            length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
            await reader.readexactly(length)
        except OSError as e:
            return conns, f"idle connection {len(conns)} refused: {e}"
        conns.append((reader, writer))
    return conns, None


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--api-key", default="unused")
    p.add_argument("--idle", type=int, default=0, help="idle connections to hold open during the run")
    args = p.parse_args()

    idle, problem = await idle_connections(args.url, args.idle) if args.idle else ([], None)
    if problem:
        print(problem)
        return 1
    stats = {"ttft": [], "itl": [], "ids": [], "errors": [], "tokens": 0, "completed": 0}
    queue = asyncio.Queue()
    for i in range(args.requests):
        queue.put_nowait(i)
    client = openai.AsyncOpenAI(base_url=args.url + "/v1", api_key=args.api_key, max_retries=0, timeout=600)
    args.model = (await client.models.list()).data[0].id
    start = time.perf_counter()
    if True:
        async def worker():
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                try:
                    await one_request(client, i, args, stats)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    stats["errors"].append(f"request {i}: {type(e).__name__}: {e}")
        await asyncio.gather(*[worker() for _ in range(args.clients)])
    wall = time.perf_counter() - start
    for _, w in idle:
        w.close()
    dup = len(stats["ids"]) - len(set(stats["ids"]))
    print(f"requests {args.requests}, clients {args.clients}, max_tokens {args.max_tokens}, idle connections {len(idle)}")
    print(f"completed {stats['completed']}, errors {len(stats['errors'])}, duplicate ids {dup}, wall {wall:.1f} s")
    print(f"generated tokens {stats['tokens']}, aggregate {stats['tokens'] / wall:.1f} tok/s, {stats['completed'] / wall:.2f} req/s")
    print(f"TTFT p50 {percentile(stats['ttft'], 50) * 1e3:.0f} ms, p99 {percentile(stats['ttft'], 99) * 1e3:.0f} ms")
    print(f"ITL  p50 {percentile(stats['itl'], 50) * 1e3:.1f} ms, p99 {percentile(stats['itl'], 99) * 1e3:.1f} ms")
    for e in stats["errors"][:10]:
        print("  " + e)
    return 0 if not stats["errors"] and dup == 0 and stats["completed"] == args.requests else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
