#!/bin/bash
# Multi-GPU checks and benchmarks on a machine with 2+ GPUs (run from the
# repository root with build/tp/ carried; see docs/cuda.md, docs/training.md):
#   bash build/tp/cuda_tp_run.sh info|test|single|cli1|cli2|check|dp2|bench8b|bench70b ...
# Every command runs under a watchdog (timeout) that says what it cut short,
# so one hang cannot eat the whole call; outputs are line-buffered.
set -u
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on a shared host
nccl_dir=$(python3 -c "import nvidia.nccl,os;print(os.path.join(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
[ -f "$nccl_dir/libnccl.so.2" ] || nccl_dir=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$PWD/build/tp/lib:$nccl_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The tests read goldens at the path they were built in (BRIOCHE_SOURCE_DIR = /work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
B=build/tp/cuda_model_bench
T=build/tp
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
echo "libnccl from $nccl_dir"
# w SECONDS CMD...: CMD under a watchdog; says so when it had to stop it.
w() {
  local limit=$1
  shift
  timeout -k 5 "$limit" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "!! WATCHDOG: stopped after ${limit} s (rc $rc, at $(elapsed) s): $*"
  elif [ $rc -ne 0 ]; then
    echo "!! exit status $rc: $*"
  fi
  return $rc
}
for what in "$@"; do
  echo "== $what [$(elapsed) s]"
  case $what in
    info)
      echo "binaries from commit $(cat $T/COMMIT 2>/dev/null || echo unknown)"
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
      nvidia-smi topo -m 2>&1 | head -4 ;;
    check)  # the TP tests (one GPU, incl. teardown after NCCL graphs), then TP=2 vs TP=1 (and vs f32 activations)
      w 60 $T/test_model --gtest_filter='CudaTensorParallel.*:TensorParallel*' | grep -E "^\[  |skipped|Failure|NMSE|!!"
      w 150 $B --tp 2 --check --shape llama3-8b --layers 8 --dtype bf16
      w 100 $B --tp 2 --check --shape qwen2.5-7b --layers 2 --dtype bf16 | tail -3
      BRIOCHE_CUDA_GRAPHS=0 w 120 $B --tp 2 --check --shape llama3-8b --layers 8 --dtype bf16 | tail -3 ;;
    test)
      w 120 $T/test_model --gtest_filter='CudaTensorParallel.*:TensorParallel*' | grep -E "^\[ |skipped|Failure|NMSE|!!"
      w 120 $T/test_train --gtest_filter='CudaDataParallel.*:DataParallel*' | grep -E "^\[ |skipped|Failure|data parallel|!!" ;;
    single)  # one GPU: the TP path with an NCCL communicator of one rank vs the plain model
      w 150 $B --tp 1 --check --shape llama3-8b --layers 8 --dtype bf16 | tail -3
      w 200 $B --tp 1 --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024 ;;
    cli1)  # the CLI's tensor-parallel path with one rank (hand-started rank 0 of 1)
      $T/gen_model --shape smollm2-1.7b --dtype bf16 --tokenizer-from $T/smollm2-tokenizer.gguf --out /tmp/m.gguf >/dev/null
      w 120 $T/brioche run -m /tmp/m.gguf --device cuda -n 12 --temp 0 -p "Hello" > /tmp/plain.txt
      w 120 $T/brioche run -m /tmp/m.gguf --device cuda -n 12 --temp 0 -p "Hello" --tensor-parallel 1 --tp-rank 0 --tp-master 127.0.0.1:29541 > /tmp/tp1.txt
      cmp /tmp/plain.txt /tmp/tp1.txt && echo "cli tp1 output identical to plain" ;;
    cli2)  # two GPUs: brioche run --tensor-parallel 2 against one GPU (greedy, random weights)
      $T/gen_model --shape smollm2-1.7b --dtype bf16 --tokenizer-from $T/smollm2-tokenizer.gguf --out /tmp/m.gguf >/dev/null
      w 90 $T/brioche run -m /tmp/m.gguf --device cuda -n 24 --temp 0 -p "Hello" > /tmp/plain.txt
      w 90 $T/brioche run -m /tmp/m.gguf --device cuda -n 24 --temp 0 -p "Hello" --tensor-parallel 2 > /tmp/tp2.txt
      if cmp /tmp/plain.txt /tmp/tp2.txt; then echo "cli tp2 output identical to one GPU"; else
        echo "one GPU: $(head -c 300 /tmp/plain.txt | od -An -c | tr -s ' ' | head -c 600)"
        echo "TP=2:    $(head -c 300 /tmp/tp2.txt | od -An -c | tr -s ' ' | head -c 600)"; fi
      w 120 $T/brioche bench -m /tmp/m.gguf --device cuda --tensor-parallel 2 2>&1 | tail -6 ;;
    dp2)  # data-parallel LoRA training: --gpus 2 with grad-accum 2 vs one GPU with grad-accum 4
      w 100 $T/test_train --gtest_filter='CudaDataParallel.*:DataParallel*' | grep -E "^\[ |skipped|Failure|data parallel|!!"
      $T/gen_model --shape smollm2-135m --dtype bf16 --tokenizer-from $T/smollm2-tokenizer.gguf --out /tmp/smol.gguf >/dev/null
      python3 bench/upper_case_data.py --out /tmp/dpdata --format completion --train 40 --valid 8 --seed 2 \
        --prefix "Repeat loudly: "
      common="-m /tmp/smol.gguf --data /tmp/dpdata --device cuda --iters 8 --batch-size 2 --lora-dropout 0.05 --learning-rate 1e-3 --steps-per-report 4 --seed 1"
      w 120 $T/brioche train $common --gpus 1 --grad-accum 4 -o /tmp/dp_one 2>&1 | grep -E "^step|eval step|written|rror|^brioche|!!"
      w 150 $T/brioche train $common --gpus 2 --grad-accum 2 -o /tmp/dp_two 2>&1 | grep -E "^step|eval step|written|rror|^brioche|rank|!!"
      python3 - <<'PY'
import json, math
try:
    import safetensors.numpy as st
except ImportError:
    import safetensors.torch as st
one = json.load(open("/tmp/dp_one/metrics.json")); two = json.load(open("/tmp/dp_two/metrics.json"))
l1, l2 = one["evals"][-1]["loss"], two["evals"][-1]["loss"]
t1, t2 = one["evals"][-1].get("train_loss"), two["evals"][-1].get("train_loss")
print(f"dp2 final eval loss: 1 GPU x accum 4 {l1:.6f}, 2 GPUs x accum 2 {l2:.6f} (rel diff {abs(l1 - l2) / abs(l1):.2e}); train loss {t1} vs {t2}")
a = st.load_file("/tmp/dp_one/adapter_model.safetensors"); b = st.load_file("/tmp/dp_two/adapter_model.safetensors")
def rel(x, y):
    x = [float(v) for v in x.flatten().tolist()]; y = [float(v) for v in y.flatten().tolist()]
    num = sum((p - q) ** 2 for p, q in zip(x, y)); den = sum(q * q for q in y)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)
worst = max((rel(b[k], a[k]), k) for k in a)
print(f"dp2 adapter: {len(a)} tensors (same names: {sorted(a) == sorted(b)}), worst relative L2 {worst[0]:.2e} ({worst[1]})")
ok = sorted(a) == sorted(b) and abs(l1 - l2) <= 1e-3 * abs(l1) and worst[0] <= 1e-2
print("dp2", "PASS" if ok else "FAIL", "(bars: eval loss 1e-3 relative, adapter tensors 1e-2 relative L2)")
PY
      ;;
    bench8b)
      w 150 $B --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024
      w 150 $B --tp 2 --shape llama3-8b --dtype bf16 --decode 128 --prefill 0 --batch 64 --context 1024 ;;
    bench70b)
      w 240 $B --tp 2 --shape llama3-70b --dtype bf16 --decode 64 --prefill 0 --batch 64 --context 1024 ;;
    *) echo "unknown mode $what" ;;
  esac
done
echo "== done [$(elapsed) s]"
