#!/bin/bash
# Copies the CUDA binaries and the non-system shared libraries they need into
# build/dev/ (small enough to carry to the device machine).
set -eu
source "$(dirname "$0")/pack_common.sh"
mkdir -p build/dev/lib
for b in cuda_model_bench gen_model brioche; do
  strip -o build/dev/$b build/cuda/$b
done
# The harness alone (the other backend tests need more layers than
# test_backend links while tests/CMakeLists.txt is in flux).
c++ -O2 build/cuda/tests/CMakeFiles/test_backend.dir/backend/cuda_ops_test.cpp.o -o build/dev/cuda_ops_test \
  build/cuda/libbrioche_backend.a /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a \
  build/cuda/libbrioche_core.a -L/usr/local/cuda/lib64 -lcudart -lcublas -lcublasLt -lpthread -ldl
strip build/dev/cuda_ops_test
strip -o build/dev/test_model build/cuda/tests/test_model  # CudaDecodeGraph.*
strip -o build/dev/test_backend build/cuda/tests/test_backend  # CudaFusedMatmul.* (needs ops/)
copy_runtime_libs build/dev build/dev/cuda_ops_test build/dev/cuda_model_bench build/dev/test_model build/dev/test_backend build/dev/brioche
pack_tokenizer build/dev/gen_model build/dev
du -sh build/dev
