#!/bin/bash
# Copies cuda_model_bench and the non-system shared libraries it needs into
# build/tp/ (carried to the device machine; NCCL and CUDA's libraries are
# found there, see bench/cuda_tp_run.sh).
set -eu
mkdir -p build/tp/lib
strip -o build/tp/cuda_model_bench build/cuda/cuda_model_bench
strip -o build/tp/brioche build/cuda/brioche
strip -o build/tp/gen_model build/cuda/gen_model
strip -o build/tp/test_model build/cuda/tests/test_model  # CudaTensorParallel.*
# The default model's tokenizer alone, for a random-weight model that runs
# through `brioche run/serve --tensor-parallel` there.
model=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
build/tp/gen_model --tokenizer-only --tokenizer-from "$model" --out build/tp/smollm2-tokenizer.gguf
for lib in $(ldd build/tp/cuda_model_bench build/tp/brioche build/tp/gen_model | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libstdc++*|*/libcudart*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libgcc_s*|*/libcuda.so*) ;;
    /usr/local/cuda*) ;;
    *) cp -L "$lib" build/tp/lib/ ;;
  esac
done
cp bench/cuda_tp_run.sh build/tp/
du -sh build/tp
