#!/usr/bin/env python3
"""What each kernel of a layer adds to a decode step, from a kernel trace.

    BRIOCHE_CUDA_TRACE=/tmp/trace.csv build/dev/cuda_model_bench --shape llama3-8b \\
        --dtype q4_0 --decode 64 --prefill 0 --batch 0
    python3 bench/cuda_trace_chain.py /tmp/trace.csv

The trace (src/backend/cuda/kernel_trace.h) holds, per kernel, when its
CTA 0 became resident and when its wait for the kernel before returned, in
that order. In a chain of dependent kernels the second is when the kernel
before completed, so added[i] = released[i + 1] - released[i] is what kernel
i adds to the step. A layer repeats the same kernels, so the script finds
the period of the kernels' shapes (grid CTAs x threads), and prints for each
kernel of a layer the median of what it adds and how long its CTA 0 was
resident before its wait returned ("ahead": what PDL let it do early).
"""
import csv
import statistics
import sys


def read(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [(int(r["resident_ns"]), int(r["released_ns"]), int(r["grid"]), int(r["block"])) for r in rows]


def period(shapes, longest=96):
    """The smallest shift under which at least 90% of the kernels' shapes repeat."""
    n = len(shapes)
    for p in range(2, min(longest, n // 3) + 1):
        same = sum(shapes[i] == shapes[i + p] for i in range(n - p))
        if same >= 0.9 * (n - p):
            return p
    sys.exit(f"no repeating layer in {n} kernels")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    records = read(sys.argv[1])
    if len(records) < 10:
        sys.exit(f"{sys.argv[1]}: {len(records)} kernels, too few to find a layer")
    shapes = [(g, b) for _, _, g, b in records]
    p = period(shapes)
    # A layer as it runs mid-trace, starting at a kernel whose shape occurs
    # once per layer (the attention, usually); positions count from each
    # occurrence of that shape, and kernels that do not match the layer's
    # shape at their position (the embedding, the lm_head, ...) are left out.
    mid = len(shapes) // 2
    anchor = next((i for i in range(mid, mid + p) if shapes[i:i + p].count(shapes[i]) == 1), mid)
    layer = shapes[anchor:anchor + p]
    added = {j: [] for j in range(p)}
    ahead = {j: [] for j in range(p)}
    j = p
    for i in range(len(records) - 1):
        j = 0 if shapes[i] == layer[0] else j + 1
        if j >= p or shapes[i] != layer[j]:
            continue
        added[j].append((records[i + 1][1] - records[i][1]) / 1000)
        ahead[j].append((records[i][1] - records[i][0]) / 1000)
    print(f"{len(records)} kernels; a layer repeats every {p}")
    print(f"{'#':>3} {'CTAs':>6} {'threads':>7} {'adds us':>8} {'ahead us':>8} {'n':>6}")
    total = 0.0
    for j in range(p):
        g, b = layer[j]
        a = statistics.median(added[j]) if added[j] else float("nan")
        r = statistics.median(ahead[j]) if ahead[j] else float("nan")
        total += a
        print(f"{j:>3} {g:>6} {b:>7} {a:>8.2f} {r:>8.2f} {len(added[j]):>6}")
    print(f"a layer: {total:.2f} us (sum of the medians)")


if __name__ == "__main__":
    main()
