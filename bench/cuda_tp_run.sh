#!/bin/bash
# Tensor-parallel checks and benchmarks on a machine with 2+ GPUs (run from
# the repository root with build/tp/ carried; see docs/cuda.md).
#   bash build/tp/cuda_tp_run.sh info|test|single|cli1|cli2|check|bench8b|bench70b ...
set -u
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on a shared host
nccl_dir=$(python3 -c "import nvidia.nccl,os;print(os.path.join(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
[ -f "$nccl_dir/libnccl.so.2" ] || nccl_dir=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$PWD/build/tp/lib:$nccl_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=build/tp/cuda_model_bench
echo "libnccl from $nccl_dir"
for what in "$@"; do
  case $what in
    info)
      nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
      nvidia-smi topo -m 2>&1 | head -6 ;;
    check)
      timeout 200 $B --tp 2 --check --shape llama3-8b --layers 8 --dtype bf16
      timeout 200 $B --tp 2 --check --shape qwen2.5-7b --layers 4 --dtype bf16
      BRIOCHE_CUDA_GRAPHS=0 timeout 200 $B --tp 2 --check --shape llama3-8b --layers 8 --dtype bf16 | tail -1 ;;
    test)
      timeout 120 build/tp/test_model --gtest_filter='CudaTensorParallel.*:TensorParallel*' ;;
    single)  # one GPU: the TP path with an NCCL communicator of one rank vs the plain model
      timeout 200 $B --tp 1 --check --shape llama3-8b --layers 8 --dtype bf16
      BRIOCHE_CUDA_GRAPHS=0 timeout 200 $B --tp 1 --check --shape llama3-8b --layers 8 --dtype bf16 | tail -1
      timeout 250 $B --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024
      timeout 250 $B --tp 1 --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024 ;;
    cli1)  # the CLI's tensor-parallel path with one rank (hand-started rank 0 of 1)
      build/tp/gen_model --shape smollm2-1.7b --dtype bf16 --tokenizer-from build/tp/smollm2-tokenizer.gguf --out /tmp/m.gguf >/dev/null
      timeout 120 build/tp/brioche run -m /tmp/m.gguf --device cuda -n 12 --temp 0 -p "Hello" > /tmp/plain.txt
      timeout 120 build/tp/brioche run -m /tmp/m.gguf --device cuda -n 12 --temp 0 -p "Hello" --tensor-parallel 1 --tp-rank 0 --tp-master 127.0.0.1:29541 > /tmp/tp1.txt
      echo "plain: $(cat /tmp/plain.txt | od -c | head -2 | tail -1)"; cmp /tmp/plain.txt /tmp/tp1.txt && echo "cli tp1 output identical to plain" ;;
    cli2)  # two GPUs: brioche run --tensor-parallel 2 against one GPU
      build/tp/gen_model --shape smollm2-1.7b --dtype bf16 --tokenizer-from build/tp/smollm2-tokenizer.gguf --out /tmp/m.gguf >/dev/null
      timeout 120 build/tp/brioche run -m /tmp/m.gguf --device cuda -n 24 --temp 0 -p "Hello" > /tmp/plain.txt
      timeout 120 build/tp/brioche run -m /tmp/m.gguf --device cuda -n 24 --temp 0 -p "Hello" --tensor-parallel 2 > /tmp/tp2.txt
      cmp /tmp/plain.txt /tmp/tp2.txt && echo "cli tp2 output identical to one GPU"
      timeout 200 build/tp/brioche bench -m /tmp/m.gguf --device cuda --tensor-parallel 2 2>&1 | tail -8 ;;
    bench8b)
      timeout 250 $B --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024
      timeout 250 $B --tp 2 --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024 ;;
    bench70b)
      timeout 400 $B --tp 2 --shape llama3-70b --dtype bf16 --decode 64 --prefill 0 --batch 64 --context 1024 ;;
  esac
done
