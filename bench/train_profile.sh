#!/bin/bash
# Where a LoRA training step's device time goes, kernel by kernel, on the H200
# test machine: ncu times every kernel of a train_step_bench run on its own
# (clocks and caches left as they are), summed by kernel name. Two of the 32
# layers at the Llama-3-8B shape, so the per-layer rows times 16 are a whole
# step's layers; the head's rows are a whole step's.
#   bash bench/train_profile.sh [train_step_bench flags...]
# Needs a folder with train_step_bench (BIN, default build/devt), carried.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
bin=${BIN:-build/devt}
export LD_LIBRARY_PATH=$PWD/$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
[ $# -gt 0 ] || set -- --shape llama3-8b --dtype bf16 --prompt 2048 --response 4096 --segment-size 1 --offload --layers 2
# --steps 1: the warm-up step and one timed step are both profiled.
ncu --metrics gpu__time_duration.sum --csv --clock-control none --cache-control none \
  $bin/train_step_bench "$@" --steps 1 > "$out/train_profile.csv" 2> "$out/train_profile.err"
python3 - "$out/train_profile.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')) if r.get('Metric Name') == 'gpu__time_duration.sum']
agg = collections.defaultdict(lambda: [0.0, 0])
scale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}
for r in rows:
    a = agg[r['Kernel Name'][:120]]; a[0] += float(r['Metric Value'].replace(',', '')) * scale.get(r['Metric Unit'], 1.0); a[1] += 1
tot = sum(v[0] for v in agg.values())
print(f"{len(rows)} kernels over 2 steps (warm-up + timed), {tot/2e3:.1f} ms per step; per step below")
print(f"{'ms/step':>9} {'calls/step':>10} {'avg us':>8}  kernel")
for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:40]:
    print(f"{t/2e3:9.3f} {n/2:10.1f} {t/n:8.1f}  {k}")
PY
