#!/bin/bash
# Copies the CUDA binaries and the non-system shared libraries they need into
# build/dev/ (small enough to carry to the device machine).
set -eu
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
# Libraries from this machine's distribution that the device image lacks
# (CUDA's own come from /usr/local/cuda there).
for lib in $(ldd build/dev/cuda_ops_test build/dev/cuda_model_bench build/dev/test_model build/dev/test_backend build/dev/brioche | awk '/=>/ {print $3}' | sort -u); do
  case "$lib" in
    */libstdc++*|*/libcudart*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libgcc_s*|*/libcuda.so*) ;;
    /usr/local/cuda*) ;;
    *) cp -L "$lib" build/dev/lib/ ;;
  esac
done
# The default model's tokenizer alone (tokenizer.* keys, no weights), for a
# random-weight model that runs through `brioche run/serve` on the device.
model=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] && build/dev/gen_model --tokenizer-only --tokenizer-from "$model" --out build/dev/smollm2-tokenizer.gguf
du -sh build/dev
