#!/bin/bash
# Training on the H200 test machine, in one call: the CUDA training tests,
# `brioche train --device cuda` end to end, then train_step_bench (Llama-3-8B
# shape, bf16, rank 16 on all seven projections) side by side with the
# transformers + peft peer (bench/train_peft_peer.py), and the longest SFT
# sequence. Binaries come from bench/train_pack.sh (carry ["build/train-dev"]).
#   bash bench/train_device_run.sh check|bench|all [budget_s]
#   bash bench/train_device_run.sh followup   (tests, ORPO 4,096 lean: a short second call)
# The longest SFT sequence has its own script: bench/train_longest.sh.
set -u
mode=${1:-all}
out=${OUT:-/tmp/out}
mkdir -p "$out"
bin=build/train-dev
nd=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/$bin/lib:$nd:/usr/local/cuda/lib64 NCCL_NVLS_ENABLE=0
# The tests read goldens at the path they were built in (BRIOCHE_SOURCE_DIR = /work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
# In the tests, activations start as NaN on the device too: a kernel that
# reads one before it is written fails a test (not in the timed runs: it is a fill).
poison() { BRIOCHE_POISON=1 "$@"; }
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "$mode" = followup ]; then
  poison timeout 90 $bin/test_train --gtest_filter='CudaTrain.*' 2>&1 | tee "$out/test.log" | grep -E "^\[ |skipped|Failure|Expected|Which is|error" | head -40
  b=$bin/train_step_bench
  timeout 60 $b --shape llama3-8b --dtype bf16 --prompt 2048 --response 4096 --segment-size 1 --offload --offload-attention --steps 3 2>&1 | tee -a "$out/bench.log" | grep -E "^\||step [0-9]|model "
  echo "done in $(elapsed) s"; exit 0
fi
if [ "$mode" != bench ]; then
  echo "== CUDA training tests (CPU reference on the same machine)"
  poison timeout 90 $bin/test_train --gtest_filter='CudaTrain.*' 2>&1 | tee "$out/test.log" | grep -E "^\[ |skipped|Failure|Expected|Which is|error" | head -60
  echo "== brioche train --device cuda (random smollm2-135m weights, the real tokenizer) [$(elapsed) s]"
  $bin/gen_model --shape smollm2-135m --dtype bf16 --tokenizer-from $bin/smollm2-tokenizer.gguf --out /tmp/smol.gguf >/dev/null
  python3 bench/upper_case_data.py --out /tmp/pref --format preference --train 24 --seed 1
  timeout 120 $bin/brioche train -m /tmp/smol.gguf --data /tmp/pref --method orpo --iters 6 --batch-size 2 \
    --device cuda --prefix-shared --grad-checkpoint --offload-boundaries --boundary-dtype bf16 --device-boundaries 1 \
    --lora-dropout 0.05 --steps-per-report 2 \
    -o /tmp/adapter_cuda 2>&1 | tail -6
  ls /tmp/adapter_cuda
  python3 -c "import json;m=json.load(open('/tmp/adapter_cuda/metrics.json'));print('metrics: device', m['config']['device'], 'peak_device_memory_bytes', m.get('peak_device_memory_bytes'), 'last eval', {k: round(v, 4) for k, v in m['evals'][-1].items() if k in ('loss','accuracy','margin')})"
  python3 -c "
import json, safetensors.torch as st
t = st.load_file('/tmp/adapter_cuda/adapter_model.safetensors'); c = json.load(open('/tmp/adapter_cuda/adapter_config.json'))
print('adapter:', len(t), 'tensors, r', c['r'], 'targets', sorted(c['target_modules']))"
fi
[ "$mode" = check ] && exit 0
# Stages in order of importance; each runs only while the call's time allows (budget $2 s, default 290).
budget=${2:-290}
left() { [ $(( budget - $(elapsed) )) -gt "$1" ]; }
b=$bin/train_step_bench
run() { echo "-- $* [$(elapsed) s]"; timeout 150 "$@" 2>&1 | tee -a "$out/bench.log" | grep -E "^\||step [0-9]|model |orpo:|sft:|longest|failed|rror"; }
peer() {
  python3 -c "import peft" 2>/dev/null || { python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $bin/whl/*.whl && export PYTHONPATH=/tmp/site; }
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/train_peft_peer.py --shape llama3-8b --prompt 2048 --runs "$1" --steps 3 2>&1 \
    | tee -a "$out/peer.log" | grep -E "^\||torch |model built|step|rror"
}
orpo="--shape llama3-8b --dtype bf16 --prompt 2048"
echo "== ours: Llama-3-8B shape, bf16 base, rank 16 x 7 projections, ORPO (prompt 2048, chosen/rejected 4096 each)"
run $b $orpo --response 4096 --segment-size 1 --offload --offload-attention --steps 3
echo "== peer: transformers + peft, same shape and loss [$(elapsed) s]"
left 80 && peer 4096:0,4096:1,16384:1
left 40 && run $b $orpo --response 4096 --segment-size 1 --offload --steps 3
left 50 && run $b $orpo --response 16384 --segment-size 1 --offload --offload-attention --steps 2
echo "== longest SFT at batch 1 [$(elapsed) s]"
left 300 && bash bench/train_longest.sh $bin bf16 524288
echo "done in $(elapsed) s"
