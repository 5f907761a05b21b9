#!/bin/bash
# brioche and llama.cpp with CUDA on the same GGUF files, in one call on the
# H200: prefill (pp 2048) and decode (tg 128, batch 1), alternating twice so
# both see the same machine state. The models are random weights in real
# shapes, written there by gen_model (no vocabulary: llama.cpp feeds random
# ids, so does brioche bench).
#   [ROUNDS=2] bash bench/cuda_vs_llama_cpp.sh [shape:dtype ...]
# Needs, carried: build/dev (bench/cuda_pack.sh; brioche and gen_model) and
# build/llama-cuda/llama-bench.gz (bench/llama_cpp_cuda_build.sh).
set -u
export LD_LIBRARY_PATH=$PWD/build/dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp/out}
mkdir -p "$out"
gzip -dc build/llama-cuda/llama-bench.gz > /tmp/llama-bench && chmod +x /tmp/llama-bench
[ $# -gt 0 ] || set -- smollm2-135m:bf16 llama3-8b:q4_0 llama3-8b:q4_k llama3-8b:q8_0 llama3-8b:bf16
for spec in "$@"; do
  shape=${spec%%:*} dtype=${spec##*:} model=/tmp/$shape-$dtype.gguf
  build/dev/gen_model --shape "$shape" --dtype "$dtype" --out "$model" || continue
  for round in $(seq "${ROUNDS:-2}"); do
    echo "-- $shape $dtype, round $round"
    /tmp/llama-bench -m "$model" -ngl 99 -fa 1 -p 2048 -n 128 -r 3 -o md 2>&1 | grep -E "pp2048|tg128|error" |
      tee -a "$out/llama_cpp.md"
    build/dev/brioche bench -m "$model" --device cuda -p 2048 -n 128 -r 3 2>&1 | grep -E "pp 2048|tg 128|rror" |
      tee -a "$out/brioche.md"
  done
  rm -f "$model"
done
