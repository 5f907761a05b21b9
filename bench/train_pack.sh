#!/bin/bash
# Copies the CUDA training binaries and the non-system shared libraries they
# need into build/train-dev/ (carried to the device machine; see
# bench/train_device_run.sh). Build first:
#   cmake --preset cuda -B build/cuda-train && ninja -C build/cuda-train test_train train_step_bench brioche gen_model
set -eu
src=${BUILD:-build/cuda-train}
dst=build/train-dev
mkdir -p $dst/lib
strip -o $dst/test_train $src/tests/test_train
for b in train_step_bench brioche gen_model; do strip -o $dst/$b $src/$b; done
# Libraries from this machine's distribution that the device image lacks
# (CUDA's own come from /usr/local/cuda there, NCCL from its PyTorch).
for lib in $(ldd $dst/test_train $dst/train_step_bench $dst/brioche $dst/gen_model | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libstdc++*|*/libcudart*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libgcc_s*|*/libcuda.so*|*/libnccl*) ;;
    /usr/local/cuda*) ;;
    *) cp -L "$lib" $dst/lib/ ;;
  esac
done
# The default model's tokenizer alone, for `brioche train` on random weights there.
model=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] && $src/gen_model --tokenizer-only --tokenizer-from "$model" --out $dst/smollm2-tokenizer.gguf
# The training goldens the tests read (BRIOCHE_SOURCE_DIR is this checkout there too: tests/train/golden travels).
du -sh $dst
