#!/bin/bash
# Where a decode step's time goes, kernel by kernel, on the H200 test machine:
# nsys traces the decode graphs' kernel nodes (with programmatic dependent
# launch they overlap, so the sum is an upper bound of the step); without
# nsys, ncu times each kernel of eager decode steps on its own.
#   bash bench/cuda_profile.sh [shape:dtype[:what] ...]   (default smollm2-135m:bf16)
# what: b1 (decode at batch 1, the default), b64 (64 sequences decoding at
# 1,024 cached positions) or prefill (one 2,048-token prompt); the table is
# per step (per prompt for prefill).
# Needs build/dev from bench/cuda_pack.sh, carried.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build/dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
bin=build/dev
[ $# -gt 0 ] || set -- smollm2-135m:bf16
nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
for spec in "$@"; do
  IFS=: read -r shape dtype what <<<"$spec"
  what=${what:-b1}
  name=${shape}_${dtype}_$what
  case $what in
    b1) steps=64 run="--decode $steps --prefill 0 --batch 0" eager="--decode 16 --prefill 0 --batch 0" ;;
    b64) steps=35 run="--decode 0 --prefill 0 --batch 64 --context 1024 --batch-steps 32" eager=$run ;;  # 3 warm-up steps + 32
    prefill) steps=4 run="--decode 0 --prefill 2048 --batch 0" eager=$run ;;
    *) echo "what: expected b1, b64 or prefill, got $what" >&2; exit 2 ;;
  esac
  echo "== $shape $dtype $what"
  if [ -n "$nsys" ]; then
    "$nsys" profile -q --cuda-graph-trace=node -t cuda -o "$out/$name" --force-overwrite true \
      $bin/cuda_model_bench --shape "$shape" --dtype "$dtype" $run 2>&1 | grep -E "decode|prefill"
    # Kernel sums over the run; divide by the steps for one step.
    "$nsys" stats -q --report cuda_gpu_kern_sum --format csv "$out/$name.nsys-rep" > "$out/$name.csv" 2>/dev/null
    python3 - "$out/$name.csv" $steps <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if l.strip() and not l.startswith('Processing')))
steps = int(sys.argv[2])
tot = sum(float(r['Total Time (ns)']) for r in rows)
print(f"{'us/step':>9} {'calls/step':>10} {'avg us':>8}  kernel   (sum {tot/steps/1e3:.1f} us/step incl. warm-up)")
for r in rows[:25]:
    t = float(r['Total Time (ns)']); n = int(r['Instances'])
    print(f"{t/steps/1e3:9.1f} {n/steps:10.1f} {float(r['Avg (ns)'])/1e3:8.2f}  {r['Name'][:110]}")
PY
  else
    command -v ncu >/dev/null || { echo "neither nsys nor ncu here"; exit 1; }
    BRIOCHE_CUDA_GRAPHS=0 ncu --metrics gpu__time_duration.sum --csv --clock-control none --launch-skip 2000 --launch-count 600 \
      $bin/cuda_model_bench --shape "$shape" --dtype "$dtype" $eager > "$out/$name.csv" 2>/dev/null
    python3 - "$out/$name.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')) if r.get('Metric Name') == 'gpu__time_duration.sum']
agg = collections.defaultdict(lambda: [0.0, 0])
for r in rows:
    a = agg[r['Kernel Name'][:110]]; a[0] += float(r['Metric Value'].replace(',', '')); a[1] += 1
tot = sum(v[0] for v in agg.values())
print(f"{len(rows)} kernels, {tot/1e3:.1f} us (units of the metric)")
for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"{t:10.0f} {n:5d} {t/n:8.1f}  {k}")
PY
  fi
done
