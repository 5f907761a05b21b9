#!/bin/bash
# Gemma 4 and Qwen 3.5 at real shapes on one GPU, in one call (issues 46 and
# 47): for each shape, make a random-weight checkpoint (make_model.py), run
# brioche's user path (`brioche bench`: prefill, decode at batch 1 and at 64
# rows), a NaN check (`brioche serve`, one completion with logprobs: finite
# log-softmax values mean finite logits over the whole vocabulary), the torch peer
# (torch_peer.py, bf16 only) and the bandwidth bound of a decode step
# (bandwidth_bound.py); then one table. Needs python3 with torch (CUDA).
#
#   bash bench/families/run_gpu.sh BRIOCHE_BIN            # the GPU run (~6-8 min on an H100/H200)
#   bash bench/families/run_gpu.sh BRIOCHE_BIN --cpu      # the same steps on the tiny shapes, on the CPU
#
# Environment: OUT (logs and table; default /tmp/families_out), FAMILIES_WORK
# (where models are written, one at a time, deleted after; default
# /dev/shm/brioche_families when /dev/shm has 40 GB free, else
# /tmp/brioche_families), FAMILIES_BUDGET_S (shapes not started once this
# many seconds have passed are skipped and listed; default 400; each
# command also has a time limit, so one hang costs minutes, not the call),
# FAMILIES_SHAPES (a subset of the plan's names, space-separated).
set -u -o pipefail
bin=${1:?usage: run_gpu.sh BRIOCHE_BIN [--cpu]}
mode=${2:-gpu}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/families_out}
# Models go to /dev/shm when it has room (memory speed, and brioche's mmap shares the pages), else /tmp.
shm_free_gb=$(df -BG --output=avail /dev/shm 2> /dev/null | tail -1 | tr -dc 0-9)
default_work=/tmp/brioche_families
[ "${shm_free_gb:-0}" -gt 40 ] && default_work=/dev/shm/brioche_families
work=${FAMILIES_WORK:-$default_work}
budget=${FAMILIES_BUDGET_S:-400}
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH=$(dirname "$(readlink -f "$bin")")/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
table=$out/table.md
start=$SECONDS

# name shape layers(0: all) bits prefill decode batch
if [ "$mode" = --cpu ]; then
  device=cpu
  card="H100 SXM (bound shown for reference only)"
  plan=(
    "gemma4-tiny gemma4-tiny 0 0 64 16 4"
    "gemma4-tiny-keqv gemma4-tiny-keqv 0 0 64 16 4"
    "qwen3.5-tiny qwen3.5-tiny 0 0 96 16 4"
    "qwen3.5-moe-tiny qwen3.5-moe-tiny 0 0 96 16 4"
    "gemma4-tiny-q4 gemma4-tiny 0 4 64 16 4"
  )
else
  device=cuda
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
  # Priority order; the budget skips from the end. Layer counts: the shapes
  # that do not fit the disk/time of one call keep their real layers' shapes
  # and fewer of them (the table says how many). The MoE shape decodes 64
  # steps, not 128: above 8 rows brioche's experts run in a host loop per
  # expert, ~0.1 s a step at 64 rows.
  plan=(
    "qwen3.5-9b qwen3.5-9b 0 0 8192 128 64"
    "gemma4-e4b gemma4-e4b 0 0 2048 128 64"
    "qwen3.5-35b-a3b-L12 qwen3.5-35b-a3b 12 0 8192 64 64"
    "gemma4-e4b-q4 gemma4-e4b 0 4 2048 128 64"
    "qwen3.5-9b-q4 qwen3.5-9b 0 4 8192 128 64"
    "gemma4-31b-L12 gemma4-31b 12 0 2048 128 64"
  )
fi
threads=()
[ "$device" = cpu ] && threads=(-t 2)

# nan_check DIR LOGPREFIX: `brioche serve` on the model, one /v1/completions request (8 prompt ids,
# 4 greedy tokens, logprobs): each token's log-probability is a log-softmax over the whole
# vocabulary, so finite values mean finite logits everywhere.
nan_check() {
  local port=$(( 18000 + RANDOM % 2000 )) pid i
  timeout 150 "$bin" serve -m "$1" --device "$device" ${threads[@]+"${threads[@]}"} --port $port --ctx 512 > "$2.serve.log" 2>&1 &
  pid=$!
  for i in $(seq 500); do curl -sf localhost:$port/health > /dev/null && break; kill -0 $pid 2> /dev/null || break; sleep 0.2; done
  curl -s localhost:$port/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt": [2, 100, 200, 300, 40, 50, 60, 70], "max_tokens": 4, "temperature": 0, "logprobs": 1}' \
    > "$2.nan.json" 2>&1
  kill $pid 2> /dev/null; wait $pid 2> /dev/null
  python3 -c 'import json, math, sys
try:
    lp = json.load(open(sys.argv[1]))["choices"][0]["logprobs"]["token_logprobs"]
except Exception as e:
    sys.exit(print(f"FAILED: no logprobs in the reply ({e}); see {sys.argv[1]} and the serve log"))
ok = all(isinstance(x, (int, float)) and math.isfinite(x) for x in lp)
print(("finite" if ok else "NOT FINITE") + ": logprobs of 4 greedy tokens " + ", ".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in lp))' "$2.nan.json"
}

# bench_rate LOG TEST: the tokens/s of a `brioche bench` row ("| tg 128 x64 | 1234.56 | 1.2 |").
bench_rate() { awk -F'|' -v t="$2" '{gsub(/^ +| +$/, "", $2)} $2 == t {gsub(/ /, "", $3); print $3}' "$1" | tail -1; }
peer_rate() { awk -F'|' -v t="$2" '{gsub(/^ +| +$/, "", $3)} $3 == t {gsub(/ /, "", $4); print $4}' "$1" | tail -1; }
pct() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f%%", 100 * a / b}'; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }

{
  echo "card: $card; brioche: $bin; $(python3 -c 'import torch; print("torch", torch.__version__)')"
  echo
  echo "| shape | layers | weights | test | brioche tok/s | % of bound | bound tok/s | torch tok/s | brioche/torch |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$table"
skipped=()
for entry in "${plan[@]}"; do
  read -r name shape layers bits prefill decode batch <<< "$entry"
  if [ -n "${FAMILIES_SHAPES:-}" ] && [[ " $FAMILIES_SHAPES " != *" $name "* ]]; then continue; fi
  if (( SECONDS - start > budget )); then skipped+=("$name"); continue; fi
  echo "== $name ($(( SECONDS - start )) s in)"
  dir=$work/$name
  rm -rf "$dir"
  layer_arg=(); [ "$layers" != 0 ] && layer_arg=(--layers "$layers")
  if ! timeout 180 python3 "$here/make_model.py" --shape "$shape" --out "$dir" --bits "$bits" ${layer_arg[@]+"${layer_arg[@]}"} \
      2>&1 | tee "$out/$name.make.log"; then
    echo "| $name | | | make_model failed: $out/$name.make.log | | | | | |" >> "$table"; continue
  fi
  real=$(python3 -c "import json; s = json.load(open('$dir/brioche_shape.json')); print(f\"{s['layers']}/{s['real_layers']}\")")
  weights=$([ "$bits" = 0 ] && echo bf16 || echo "affine${bits}_g64")
  rm -f "$out/$name.bench_pp.log"
  # One call: prefill, then decode at 1 and at $batch rows (its cache holds $batch sequences of the
  # prompt's length: 38 GB at most, for gemma4-31b-L12); if that fails, prefill and decode apart.
  t0=$SECONDS
  if ! timeout 240 "$bin" bench -m "$dir" --device "$device" ${threads[@]+"${threads[@]}"} -p "$prefill" -n "$decode" -b 1 -b "$batch" -r 2 \
      > "$out/$name.bench_tg.log" 2>&1; then
    echo "   brioche bench in one call failed ($(tail -1 "$out/$name.bench_tg.log")): prefill and decode apart"
    timeout 120 "$bin" bench -m "$dir" --device "$device" ${threads[@]+"${threads[@]}"} -p "$prefill" -n 1 -b 1 -r 2 > "$out/$name.bench_pp.log" 2>&1
    timeout 120 "$bin" bench -m "$dir" --device "$device" ${threads[@]+"${threads[@]}"} -p 16 -n "$decode" -b 1 -b "$batch" -r 2 \
      > "$out/$name.bench_tg.log" 2>&1
  fi
  touch "$out/$name.bench_pp.log"
  cat "$out/$name.bench_pp.log" "$out/$name.bench_tg.log" | grep -E "^\||model:|error|Error" | grep -v "pp 16 \|tg 1 \|---\|tokens/s"
  echo "   brioche bench: $(( SECONDS - t0 )) s"
  echo "   NaN check: $(nan_check "$dir" "$out/$name")"
  if [ "$bits" = 0 ]; then
    t0=$SECONDS
    timeout 240 python3 "$here/torch_peer.py" --model "$dir" --device "$device" --prefill "$prefill" --decode "$decode" \
      --batch "$batch" --batch-steps "$decode" > "$out/$name.peer.log" 2>&1
    grep -E "^\||torch_peer|Error|error" "$out/$name.peer.log" | tail -6
    echo "   torch peer: $(( SECONDS - t0 )) s"
  fi
  for test in "pp $prefill" "tg $decode" "tg $decode x$batch"; do
    b=$(bench_rate "$out/$name.bench_pp.log" "$test"); [ -z "$b" ] && b=$(bench_rate "$out/$name.bench_tg.log" "$test")
    p=""; [ "$bits" = 0 ] && p=$(peer_rate "$out/$name.peer.log" "$test")
    bound=""; share=""
    case "$test" in
      "tg $decode") bound=$(python3 "$here/bandwidth_bound.py" "$dir" --card "$card" --rate) ;;
      "tg $decode x$batch") bound=$(python3 "$here/bandwidth_bound.py" "$dir" --card "$card" --batch "$batch" --rate) ;;
    esac
    [ -n "$bound" ] && share=$(pct "$b" "$bound")
    echo "| $name | $real | $weights | $test | ${b:-failed} | $share | $bound | ${p:--} | $(ratio "$b" "$p") |" >> "$table"
  done
  python3 "$here/bandwidth_bound.py" "$dir" --card "$card" | tee "$out/$name.bound.txt"
  rm -rf "$dir"
done
{
  echo
  [ ${#skipped[@]} -gt 0 ] && echo "skipped (time budget ${budget} s): ${skipped[*]}"
  echo "bound: bytes a decode step must read (bench/families/bandwidth_bound.py) / the card's bandwidth; x64: distinct experts of 64 rows, KV and state of 64 rows"
  echo "total: $(( SECONDS - start )) s"
} >> "$table"
echo
cat "$table"
