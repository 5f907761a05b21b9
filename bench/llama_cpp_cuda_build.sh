#!/bin/bash
# Builds llama.cpp's llama-bench with CUDA for the H200 (sm_90a only, static,
# stripped) from the llama-cpp-python source package, into build/llama-cuda/:
# the llama.cpp peer of issue 5's CUDA numbers. On two cores it takes about
# an hour; build/ persists, so it is done once. What travels to the device is
# one compressed binary: carry ["build/llama-cuda/llama-bench.tar.zst"], then
# there `tar -C /tmp -I zstd -xf build/llama-cuda/llama-bench.tar.zst`.
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
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
ninja -C $root/build -j2 llama-bench
strip -o $root/llama-bench $root/build/bin/llama-bench
tar -C $root -I 'zstd -19 -T2' -cf $root/llama-bench.tar.zst llama-bench
ls -la $root/llama-bench $root/llama-bench.tar.zst
