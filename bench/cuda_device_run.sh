#!/bin/bash
# One call on the H200 test machine: harness, sanitizer, CPU-vs-CUDA model
# check, model benchmarks and the torch peer. Expects the binaries built here
# (cmake --preset cuda && ninja -C build/cuda test_backend cuda_model_bench gen_model)
# copied to build/dev/ with bench/cuda_pack.sh, and carried: carry ["build/dev"].
#   bash bench/cuda_device_run.sh [quick|full|pdl|numbers]
# pdl: the checks, then decode with and without programmatic dependent
# launch and L2 prefetch (BRIOCHE_CUDA_PDL / BRIOCHE_CUDA_PREFETCH), in
# alternation, instead of the full benchmark. numbers: what full measures
# (CLI, every model benchmark, the torch peer) without the checks and the
# runs without graphs, when the tests ran in an earlier call and device
# time is short.
set -u
mode=${1:-full}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build/dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=build/dev
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ "$mode" != numbers ]; then
echo "== op harness"
$bin/cuda_ops_test --gtest_filter='Cuda*' 2>&1 | tee "$out/harness.log" | grep -E "^\[  |skipped|Failure|NMSE|error" | head -60
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (attention + row ops + runtime)"
  compute-sanitizer --tool memcheck --print-limit 5 $bin/cuda_ops_test \
    --gtest_filter='CudaAttention*:CudaRowOps*:CudaRuntime*:CudaArgmax*:CudaEmbedding*' 2>&1 | tail -4
fi
echo "== decode graphs against eager decode"
$bin/test_model --gtest_filter='CudaDecodeGraph*' 2>&1 | tee "$out/graphs.log" | grep -E "^\[  |skipped|Failure|NMSE|error" | head -20
echo "== model check: same random model on CPU and CUDA"
for dt in q4_k bf16 q8_0; do $bin/cuda_model_bench --check --shape smollm2-135m --dtype $dt 2>&1 | tail -1; done
fi
if [ -f $bin/smollm2-tokenizer.gguf ]; then
  echo "== brioche run/bench/serve --device cuda (random smollm2-135m weights, the real tokenizer)"
  $bin/gen_model --shape smollm2-135m --dtype bf16 --tokenizer-from $bin/smollm2-tokenizer.gguf --out /tmp/smol.gguf
  for d in cuda cpu; do
    $bin/brioche run -m /tmp/smol.gguf --device $d -n 48 --temperature 0 --ignore-eos -p "Write a haiku about bread." \
      > "$out/run_$d.txt" 2> "$out/run_$d.err"
    tail -2 "$out/run_$d.err"
  done
  cmp "$out/run_cuda.txt" "$out/run_cpu.txt" && echo "run: identical text on cuda and cpu (48 greedy tokens)"
  $bin/brioche bench -m /tmp/smol.gguf --device cuda -p 512 -n 128 -b 1 -b 16 -b 64 2>&1 | tail -8
  $bin/brioche serve -m /tmp/smol.gguf --device cuda --port 8765 > "$out/serve.log" 2>&1 &
  spid=$!
  for i in $(seq 60); do curl -sf localhost:8765/health >/dev/null && break; sleep 0.5; done
  curl -s localhost:8765/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"temperature":0}' | head -c 600; echo
  curl -s localhost:8765/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"response_format":{"type":"json_object"}}' | head -c 600; echo
  kill $spid; wait $spid
fi
if [ "$mode" = pdl ]; then
  echo "== decode b1: PDL + prefetch (default) / PDL only / neither, alternating"
  bash bench/cuda_decode_ab.sh "" "BRIOCHE_CUDA_PREFETCH=0" "BRIOCHE_CUDA_PDL=0" -- smollm2-135m:bf16:512 \
    llama3-8b:bf16:128 llama3-8b:q4_k:128 llama3-8b:q8_0:128 llama3-8b:q4_0:128
  exit 0
fi
echo "== model bench"
run() { $bin/cuda_model_bench "$@" 2>&1 | grep -v "^|---\|^| shape" | tee -a "$out/bench.md"; }
run --shape smollm2-135m --dtype bf16 --decode 256 --prefill 2048 --batch 64
without_graphs() { [ "$mode" = numbers ] || { echo "(decode without graphs)"; BRIOCHE_CUDA_GRAPHS=0 run "$@"; }; }
without_graphs --shape smollm2-135m --dtype bf16 --decode 256 --prefill 0 --batch 64
run --shape llama3-8b --dtype bf16 --decode 128 --prefill 2048 --batch 64
without_graphs --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 0
if [ "$mode" = full ] || [ "$mode" = numbers ]; then
  run --shape llama3-8b --dtype q4_k --decode 128 --prefill 0 --batch 0
  run --shape llama3-8b --dtype q8_0 --decode 128 --prefill 0 --batch 0
  run --shape llama3-8b --dtype q4_0 --decode 128 --prefill 0 --batch 0
  echo "== torch peer"
  python3 bench/cuda_torch_peer.py --shape smollm2-135m --decode 256 --prefill 2048 --batch 64 2>&1 | tail -3 | tee -a "$out/bench.md"
  python3 bench/cuda_torch_peer.py --shape llama3-8b 2>&1 | tail -3 | tee -a "$out/bench.md"
fi
