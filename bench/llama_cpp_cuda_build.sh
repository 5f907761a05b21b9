#!/bin/bash
# Builds llama.cpp's llama-bench with CUDA for the H200 from the
# llama-cpp-python source package, into build/llama-cuda/: the llama.cpp peer
# of issue 5's CUDA numbers. Static and stripped, sm_90a machine code only
# (no PTX: half the size), without OpenSSL and OpenMP (libraries the device
# may lack; a GPU benchmark needs neither): 50 MB, 24 MB gzipped (the device
# has no zstd). On two
# cores it takes about 40 minutes; build/ persists, so it is done once. What
# travels to the device is the compressed binary: carry
# ["build/llama-cuda/llama-bench.gz"] (bench/cuda_vs_llama_cpp.sh
# unpacks it there).
#   bash bench/llama_cpp_cuda_build.sh [llama-cpp-python version]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.3.36}
root=build/llama-cuda
src=$root/src/llama_cpp_python-$version
if [ ! -d "$src" ]; then
  mkdir -p $root/src
  (cd $root/src && pip download --no-deps --no-binary :all: "llama-cpp-python==$version" &&
   tar xzf "llama_cpp_python-$version.tar.gz")
fi
cmake -S "$src/vendor/llama.cpp" -B $root/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
ninja -C $root/build -j2 llama-bench
strip -o $root/llama-bench $root/build/bin/llama-bench
gzip -9 -c $root/llama-bench > $root/llama-bench.gz
ls -la $root/llama-bench $root/llama-bench.gz
