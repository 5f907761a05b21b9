#!/bin/bash
# Copies the binaries bench/cuda_sampling_run.sh needs (built in
# build/cuda-samp) and the non-system shared libraries they use into
# build/samp-dev/, to carry to the device machine.
set -eu
src=${1:-build/cuda-samp}
dst=build/samp-dev
mkdir -p $dst/lib
strip -o $dst/test_engine $src/tests/test_engine
strip -o $dst/brioche $src/brioche
strip -o $dst/gen_model $src/gen_model
for lib in $(ldd $dst/test_engine $dst/brioche $dst/gen_model | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libstdc++*|*/libcudart*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libgcc_s*|*/libcuda.so*) ;;
    /usr/local/cuda*) ;;
    *) cp -L "$lib" $dst/lib/ ;;
  esac
done
model=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
$dst/gen_model --tokenizer-only --tokenizer-from "$model" --out $dst/smollm2-tokenizer.gguf
du -sh $dst
