#!/usr/bin/env python3
"""Load test for `brioche serve` (loopback only, bounded).

N concurrent streaming clients send R chat requests in total; every stream is
checked (well-formed SSE chunks, exactly one finish_reason per choice, [DONE]
last, usage matching the streamed token count), every request id is counted
once, and p50/p99 time-to-first-token and inter-token latency are printed.
With --idle M it first opens M keep-alive connections that stay idle for the
whole run, checking that new requests are still served while they are held.

  python3 bench/server_load.py --url http://127.0.0.1:8080 --clients 64 --requests 1000 --max-tokens 16

With --compare it starts the servers itself (brioche, and llama-cpp-python's
OpenAI server on the same GGUF with the same thread count), and runs
1 client and 16 clients (--clients-list) back to back, --rounds times,
alternating servers, then prints medians and the batching ratio
(aggregate tok/s at the most clients over 1 client) per server:

  python3 bench/server_load.py --compare --rounds 3 --max-tokens 32

Aggregate tok/s = generated tokens / wall time of the whole load (prefill and
queueing included). Full-load tok/s counts only the window in which every
client has a request in flight (until the first client finds no request left
to send): with answers of uneven length (EOS), the whole-load figure also
times the tail in which the last few streams finish with fewer neighbours. llama-cpp-python's streams carry no usage chunk, so its
tokens are counted client-side (one streamed content chunk per token); its
server runs one request at a time (started with --interrupt_requests False:
by default a new request cancels the stream in progress), so concurrent
clients queue.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

import openai

DEFAULT_MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


class StreamTally:
    """What one streamed request must look like (one id, one finish, usage when
    asked) and what it measured (TTFT, inter-token gaps, content chunks); the
    same checks for both clients."""

    def __init__(self, i, args, stats):
        self.i, self.args, self.stats = i, args, stats
        self.start = time.perf_counter()
        self.first = self.last = None
        self.itl, self.ids = [], set()
        self.finishes = self.content_chunks = 0
        self.usage_tokens = None

    def chunk(self, chunk_id, usage_tokens, choices):
        """choices: (has_content, finish_reason) per choice of the chunk."""
        self.ids.add(chunk_id)
        if usage_tokens is not None:
            self.usage_tokens = usage_tokens
        for has_content, finish_reason in choices:
            if has_content:
                self.content_chunks += 1
                now = time.perf_counter()
                self.stats["chunk_times"].append(now)
                if self.first is None:
                    self.first = now
                    self.stats["ttft"].append(now - self.start)
                else:
                    self.itl.append(now - self.last)
                self.last = now
            if finish_reason:
                self.finishes += 1

    def close(self, problem=None):
        if problem is None and (self.finishes != 1 or len(self.ids) != 1 or
                                (self.args.usage and self.usage_tokens is None)):
            problem = f"finishes={self.finishes} ids={len(self.ids)} usage={self.usage_tokens}"
        if problem:
            self.stats["errors"].append(f"request {self.i}: {problem}")
            return
        self.stats["ids"].append(next(iter(self.ids)))
        self.stats["itl"].extend(self.itl)
        self.stats["tokens"] += self.usage_tokens if self.args.usage else self.content_chunks
        self.stats["completed"] += 1


def prompt(i):
    return [{"role": "user", "content": f"Request {i}: say something about the number {i}."}]


async def one_request(client, i, args, stats):
    tally = StreamTally(i, args, stats)
    extra = {"stream_options": {"include_usage": True}} if args.usage else {}
    stream = await client.chat.completions.create(
        model=args.model, messages=prompt(i), max_tokens=args.max_tokens, temperature=0.7, seed=i, stream=True,
        **extra)
    async for chunk in stream:
        tally.chunk(chunk.id, chunk.usage.completion_tokens if chunk.usage else None,
                    [(bool(c.delta.content), c.finish_reason) for c in chunk.choices])
    # The client ends the iteration only at "data: [DONE]".
    tally.close()


async def raw_sse_events(url, path, body, api_key):
    """POSTs body as JSON over a fresh HTTP/1.1 connection and yields each SSE
    `data:` payload as it arrives (chunked or close-delimited body).
    A light client for --client raw: the openai client's per-chunk parsing
    costs ~1 ms of CPU, which on a 2-core machine competes with the server."""
    host, port = url.replace("http://", "").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        payload = json.dumps(body).encode()
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
                     f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n")[0]
        if b" 200 " not in status + b" ":
            raise RuntimeError(f"HTTP status {status!r}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        pending = b""

        async def body_pieces():
            if not chunked:
                while piece := await reader.read(65536):
                    yield piece
                return
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    return
                yield await reader.readexactly(size)
                await reader.readexactly(2)

        async for piece in body_pieces():
            pending += piece
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if line.startswith(b"data:"):
                    yield line[5:].strip().decode()
    finally:
        writer.close()


async def one_request_raw(_client, i, args, stats):
    """one_request with the light client: the same checks on the stream."""
    tally = StreamTally(i, args, stats)
    done = False
    body = {"model": args.model, "messages": prompt(i), "max_tokens": args.max_tokens, "temperature": 0.7,
            "seed": i, "stream": True}
    if args.usage:
        body["stream_options"] = {"include_usage": True}
    async for data in raw_sse_events(args.url, "/v1/chat/completions", body, args.api_key):
        if done:
            return tally.close("data after [DONE]")
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        usage = chunk.get("usage")
        tally.chunk(chunk["id"], usage["completion_tokens"] if usage else None,
                    [(bool((c.get("delta") or {}).get("content")), c.get("finish_reason"))
                     for c in chunk.get("choices", [])])
    tally.close(None if done else "no [DONE]")


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


async def run_load(args):
    """One load run against args.url; returns the stats dict with wall time."""
    idle, problem = await idle_connections(args.url, args.idle) if args.idle else ([], None)
    if problem:
        return {"problem": problem}
    stats = {"ttft": [], "itl": [], "ids": [], "errors": [], "tokens": 0, "completed": 0, "chunk_times": [],
             "worker_ends": []}
    queue = asyncio.Queue()
    for i in range(args.requests):
        queue.put_nowait(i)
    client = openai.AsyncOpenAI(base_url=args.url + "/v1", api_key=args.api_key, max_retries=0, timeout=600)
    args.model = (await client.models.list()).data[0].id
    start = time.perf_counter()

    async def worker():
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                stats["worker_ends"].append(time.perf_counter())
                return
            try:
                await (one_request_raw if args.client == "raw" else one_request)(client, i, args, stats)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                stats["errors"].append(f"request {i}: {type(e).__name__}: {e}")

    await asyncio.gather(*[worker() for _ in range(args.clients)])
    stats["wall"] = time.perf_counter() - start
    stats["full_load"] = full_load_rate(stats, start)
    stats["idle"] = len(idle)
    for _, w in idle:
        w.close()
    await client.close()
    return stats


def full_load_rate(stats, start):
    """Generated tok/s while every client had a request in flight: from the
    start until the first client found the queue empty (after that the
    remaining streams finish with fewer neighbours). Content chunks in that
    window, scaled to tokens by the run's tokens per chunk."""
    end = min(stats["worker_ends"], default=None)
    chunks = len(stats["chunk_times"])
    if end is None or end <= start or chunks == 0:
        return float("nan")
    in_window = sum(1 for t in stats["chunk_times"] if t <= end)
    return in_window * (stats["tokens"] / chunks) / (end - start)


def report(args, stats):
    if "problem" in stats:
        print(stats["problem"])
        return 1
    wall = stats["wall"]
    dup = len(stats["ids"]) - len(set(stats["ids"]))
    print(f"requests {args.requests}, clients {args.clients}, max_tokens {args.max_tokens}, idle connections {stats['idle']}")
    print(f"completed {stats['completed']}, errors {len(stats['errors'])}, duplicate ids {dup}, wall {wall:.1f} s")
    print(f"generated tokens {stats['tokens']}, aggregate {stats['tokens'] / wall:.1f} tok/s, {stats['completed'] / wall:.2f} req/s")
    print(f"full load (all {args.clients} clients in flight): {stats['full_load']:.1f} tok/s")
    print(f"TTFT p50 {percentile(stats['ttft'], 50) * 1e3:.0f} ms, p99 {percentile(stats['ttft'], 99) * 1e3:.0f} ms")
    print(f"ITL  p50 {percentile(stats['itl'], 50) * 1e3:.1f} ms, p99 {percentile(stats['itl'], 99) * 1e3:.1f} ms")
    for e in stats["errors"][:10]:
        print("  " + e)
    return 0 if not stats["errors"] and dup == 0 and stats["completed"] == args.requests else 1


# ---------------------------------------------------------------- --compare

class Server:
    """A server process started for the comparison, stopped on exit."""

    def __init__(self, name, argv, port, usage):
        self.name, self.argv, self.port, self.usage = name, argv, port, usage
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(f"/tmp/server_load_{name}_{port}.log", "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready after {timeout} s; see {self.log.name}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def start_servers(args):
    servers = []
    if "brioche" in args.servers:
        servers.append(Server("brioche", [args.brioche_bin, "serve", "-m", args.gguf, "-t", str(args.threads),
                                          "--port", str(args.port)], args.port, usage=True))
    if "llama-cpp" in args.servers:
        servers.append(Server("llama-cpp", [sys.executable, "-m", "llama_cpp.server", "--model", args.gguf,
                                            "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                                            "--port", str(args.port + 1), "--verbose", "False",
                                            # its default cancels the running stream when a new request
                                            # arrives; queue them instead, so every request completes
                                            "--interrupt_requests", "False"],
                              args.port + 1, usage=False))
    return servers


async def compare(args):
    clients_list = [int(c) for c in args.clients_list.split(",")]
    servers = start_servers(args)
    results = {(s.name, c): [] for s in servers for c in clients_list}
    try:
        for s in servers:
            s.wait_ready()
            warm = argparse.Namespace(**vars(args))
            warm.url, warm.clients, warm.requests, warm.usage, warm.idle = s.url, 1, 1, s.usage, 0
            await run_load(warm)
        print(f"load average at start: {os.getloadavg()}")
        for rnd in range(args.rounds):
            for s in servers:
                for c in clients_list:
                    run = argparse.Namespace(**vars(args))
                    run.url, run.clients, run.requests, run.usage = s.url, c, c * args.requests_per_client, s.usage
                    stats = await run_load(run)
                    rate = stats["tokens"] / stats["wall"]
                    results[(s.name, c)].append((rate, stats))
                    print(f"round {rnd + 1} {s.name:9s} {c:3d} clients: {rate:7.1f} tok/s, "
                          f"{stats['completed']}/{run.requests} completed, {len(stats['errors'])} errors, "
                          f"TTFT p50 {percentile(stats['ttft'], 50) * 1e3:.0f} ms, "
                          f"ITL p50 {percentile(stats['itl'], 50) * 1e3:.1f} ms, full load {stats['full_load']:.1f} tok/s, "
                          f"load {os.getloadavg()[0]:.1f}",
                          flush=True)
                    for e in stats["errors"][:3]:
                        print("   " + e)
    finally:
        for s in servers:
            s.stop()
    print(f"load average at end: {os.getloadavg()}")
    print(f"\nmedians over {args.rounds} rounds, max_tokens {args.max_tokens}, {args.requests_per_client} requests "
          f"per client, {args.threads} threads, {args.client} client")
    print("| server | clients | aggregate tok/s (median) | rounds | full-load tok/s (median) | TTFT p50 | ITL p50 | errors |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for s in servers:
        for c in clients_list:
            runs = results[(s.name, c)]
            med = statistics.median(r for r, _ in runs)
            ttft = statistics.median(percentile(st["ttft"], 50) for _, st in runs) * 1e3
            itl = statistics.median(percentile(st["itl"], 50) for _, st in runs) * 1e3
            errors = sum(len(st["errors"]) for _, st in runs)
            failed |= errors > 0
            full = statistics.median(st["full_load"] for _, st in runs)
            print(f"| {s.name} | {c} | {med:.1f} | {', '.join(f'{r:.1f}' for r, _ in runs)} | {full:.1f} | {ttft:.0f} ms | "
                  f"{itl:.1f} ms | {errors} |")
        lo, hi = min(clients_list), max(clients_list)
        ratio = statistics.median(r for r, _ in results[(s.name, hi)]) / statistics.median(r for r, _ in results[(s.name, lo)])
        # each round's pair ran back to back, under the same machine load
        pairs = [h / l for (h, _), (l, _) in zip(results[(s.name, hi)], results[(s.name, lo)])]
        full_pairs = [h["full_load"] / l["full_load"] for (_, h), (_, l) in zip(results[(s.name, hi)], results[(s.name, lo)])]
        print(f"| {s.name} | {hi} vs {lo} | {ratio:.2f}x (ratio of medians); per round "
              f"{', '.join(f'{x:.2f}' for x in pairs)}, median {statistics.median(pairs):.2f}x | | full load per round "
              f"{', '.join(f'{x:.2f}' for x in full_pairs)}, median {statistics.median(full_pairs):.2f}x | | | |")
    return 1 if failed else 0


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--api-key", default="unused")
    p.add_argument("--idle", type=int, default=0, help="idle connections to hold open during the run")
    p.add_argument("--client", choices=["openai", "raw"], default="openai",
                   help="openai: the official async client; raw: a light SSE client (same checks, less CPU)")
    p.add_argument("--no-usage", dest="usage", action="store_false",
                   help="count streamed content chunks as tokens (servers without stream usage)")
    p.add_argument("--compare", action="store_true", help="start brioche and llama-cpp-python and compare them")
    p.add_argument("--servers", default="brioche,llama-cpp", help="--compare: which servers (comma-separated)")
    p.add_argument("--clients-list", default="1,16", help="--compare: client counts, run back to back")
    p.add_argument("--requests-per-client", type=int, default=3, help="--compare: requests = clients x this")
    p.add_argument("--rounds", type=int, default=3, help="--compare: repetitions (medians are reported)")
    p.add_argument("--threads", type=int, default=2, help="--compare: CPU threads of each server")
    p.add_argument("--port", type=int, default=18380, help="--compare: brioche's port (llama-cpp: +1)")
    p.add_argument("--gguf", default=DEFAULT_MODEL, help="--compare: model file both servers load")
    p.add_argument("--brioche-bin", default=os.path.join(REPO, "build/cpu/brioche"))
    args = p.parse_args()
    if args.compare:
        return await compare(args)
    return report(args, await run_load(args))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
