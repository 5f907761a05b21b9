#!/bin/bash
# Device sampling on the H200 in one call: the Cuda* engine tests (device
# sampler against the host Sampler, engine with and without device
# sampling), memcheck on the sampling kernel, `brioche run` text with device
# vs host sampling, and `brioche bench --engine` on the SmolLM2 shape (random
# weights, the real tokenizer) with and without device sampling.
# Here:  cmake --preset cuda -B build/cuda-samp && ninja -C build/cuda-samp test_engine brioche gen_model
#        bash bench/cuda_sampling_pack.sh           # -> build/samp-dev (carried)
# There: bash bench/cuda_sampling_run.sh            # carry ["build/samp-dev"]
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
bin=build/samp-dev
export LD_LIBRARY_PATH=$PWD/$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== engine tests (Cuda* and the host side)"
$bin/test_engine --gtest_filter='Cuda*:DeviceSampler*' 2>&1 | tee "$out/tests.log" | grep -E "^\[  |skipped|Failure|error|Expected|Which|device|host" | head -80
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (sampling kernel)"
  timeout 60 compute-sanitizer --tool memcheck --print-limit 5 $bin/test_engine \
    --gtest_filter='CudaDeviceSampler.SeededRowAloneEqualsBatched:CudaDeviceSampler.ErrorsLikeTheHost' 2>&1 | tail -3
  echo "== compute-sanitizer racecheck (sampling kernel)"
  timeout 40 compute-sanitizer --tool racecheck --print-limit 5 $bin/test_engine \
    --gtest_filter='CudaDeviceSampler.SeededRowAloneEqualsBatched' 2>&1 | tail -3
fi
echo "== random smollm2-135m bf16 with the real tokenizer"
$bin/gen_model --shape smollm2-135m --dtype bf16 --tokenizer-from $bin/smollm2-tokenizer.gguf --out /tmp/smol.gguf | tail -1
for s in 1 0; do
  BRIOCHE_CUDA_SAMPLING=$s $bin/brioche run -m /tmp/smol.gguf --device cuda -n 48 --temperature 0.8 --seed 7 --ignore-eos \
    -p "Write a haiku about bread." > "$out/run_sampled_$s.txt" 2> "$out/run_sampled_$s.err"
done
cmp "$out/run_sampled_1.txt" "$out/run_sampled_0.txt" && echo "run: identical seeded text with device and host sampling (48 tokens, T 0.8)"
echo "== brioche bench --engine (device sampling, then BRIOCHE_CUDA_SAMPLING=0)"
for t in 0.8 0; do
  for s in 1 0; do
    echo "-- temperature $t, BRIOCHE_CUDA_SAMPLING=$s"
    BRIOCHE_CUDA_SAMPLING=$s $bin/brioche bench -m /tmp/smol.gguf --device cuda -p 512 -n 128 -b 1 -b 16 -b 64 \
      --engine --temperature $t --top-k 50 --top-p 0.95 2>&1 | tail -12 | tee -a "$out/bench.md"
  done
done
