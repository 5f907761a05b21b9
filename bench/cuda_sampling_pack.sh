#!/bin/bash
# Copies the binaries bench/cuda_sampling_run.sh needs (built in
# build/cuda-samp) and the non-system shared libraries they use into
# build/samp-dev/, to carry to the device machine.
set -eu
source "$(dirname "$0")/pack_common.sh"
src=${1:-build/cuda-samp}
dst=build/samp-dev
mkdir -p $dst/lib
strip -o $dst/test_engine $src/tests/test_engine
strip -o $dst/brioche $src/brioche
strip -o $dst/gen_model $src/gen_model
copy_runtime_libs $dst $dst/test_engine $dst/brioche $dst/gen_model
pack_tokenizer $dst/gen_model $dst
du -sh $dst
