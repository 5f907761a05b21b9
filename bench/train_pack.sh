#!/bin/bash
# Copies the CUDA training binaries and the non-system shared libraries they
# need into build/train-dev/ (carried to the device machine; see
# bench/train_device_run.sh). Build first:
#   cmake --preset cuda -B build/cuda-train && ninja -C build/cuda-train test_train train_step_bench brioche gen_model
set -eu
source "$(dirname "$0")/pack_common.sh"
src=${BUILD:-build/cuda-train}
dst=build/train-dev
mkdir -p $dst/lib
strip -o $dst/test_train $src/tests/test_train
for b in train_step_bench brioche gen_model; do strip -o $dst/$b $src/$b; done
copy_runtime_libs $dst $dst/test_train $dst/train_step_bench $dst/brioche $dst/gen_model
pack_tokenizer $dst/gen_model $dst  # for `brioche train` on random weights there
# The training goldens the tests read (BRIOCHE_SOURCE_DIR is this checkout there too: tests/train/golden travels).
du -sh $dst
