#!/bin/bash
# Copies the multi-GPU binaries (tensor parallelism and data-parallel
# training) and the non-system shared libraries they need into build/tp/
# (carried to the device machine; NCCL and CUDA's libraries are found there,
# see bench/cuda_tp_run.sh). Build first, e.g.
#   cmake --preset cuda -B build/cuda-tp && ninja -C build/cuda-tp -j2 brioche cuda_model_bench gen_model test_model test_train
#   BUILD=build/cuda-tp bash bench/cuda_tp_pack.sh
set -eu
source "$(dirname "$0")/pack_common.sh"
src=${BUILD:-build/cuda}
dst=build/tp
rm -rf $dst
mkdir -p $dst/lib
strip -o $dst/cuda_model_bench $src/cuda_model_bench
strip -o $dst/brioche $src/brioche
strip -o $dst/gen_model $src/gen_model
strip -o $dst/test_model $src/tests/test_model  # CudaTensorParallel.*, TensorParallel*
strip -o $dst/test_train $src/tests/test_train  # CudaDataParallel.*, DataParallel*
# The default model's tokenizer alone, for random-weight models that run
# through `brioche run --tensor-parallel` and `brioche train --gpus` there.
pack_tokenizer $dst/gen_model $dst
copy_runtime_libs $dst $dst/cuda_model_bench $dst/brioche $dst/gen_model $dst/test_model $dst/test_train
cp bench/cuda_tp_run.sh $dst/
# Which commit the binaries were built from (printed there by `info`).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench tests tools || echo '+uncommitted')" > $dst/COMMIT
du -sh $dst
