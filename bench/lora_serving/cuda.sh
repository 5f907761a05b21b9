#!/usr/bin/env bash
# On the GPU machine, from the repository root, with the CUDA build's brioche,
# gen_model and test_train and Llama-3's tokenizer (l3tok/tokenizer.json) in BIN:
#   bash bench/lora_serving/cuda.sh BIN
# 1. the unmerged-adapter tests on the GPU (tiny transformers checkpoints);
# 2. a random Llama-3-8B bf16 with 8 random rank-16 adapters on every
#    projection, served unmerged: bench/lora_serving/load.py through HTTP.
set -u
bin=$(readlink -f "${1:-devcarry}")
repo=$(pwd)
# The tests find their goldens through the source directory of the build.
[ -e /work/main ] || { mkdir -p /work && ln -s "$repo" /work/main; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$bin/test_train" --gtest_filter='CudaServedAdapter*:CudaLoraTableAdd*:CudaLoraTable*:*LoraTerms*:*CudaQwen35ServedAdapter*:Tiny/ServedAdapter*:LoraRowsAdd*' 2>&1 | grep -E "^\[  |Failure|Expected|actual"
"$bin/gen_model" --shape llama3-8b --dtype bf16 --tokenizer-from "$bin/l3tok" --out /tmp/l8 >/dev/null 2>&1
python3 - "$repo" <<'PY'
import sys; sys.path.insert(0, sys.argv[1] + "/tests/server")
from peft_adapter import write_adapter
shapes = {"layers": 32, "hidden": 4096, "inter": 14336, "q": 4096, "kv": 1024}
for i in range(8): write_adapter(f"/tmp/adapters/a{i}", seed=200 + i, rank=16, alpha=32, shapes=shapes, b_std=0.01)
PY
"$bin/brioche" serve -m /tmp/l8 --device cuda --port 8090 --lora-dir /tmp/adapters > /tmp/serve.log 2>&1 &
for _ in $(seq 120); do curl -sf localhost:8090/health >/dev/null && break; sleep 1; done
head -3 /tmp/serve.log
python3 bench/lora_serving/load.py --port 8090 --adapters a0,a1,a2,a3,a4,a5,a6,a7 --tokens 128 --rounds 3 \
  --label "llama3-8b bf16 (random), 8 rank-16 adapters on every projection"
curl -s localhost:8090/metrics | grep -E "^brioche_(lora|engine_steps)"
pkill -f "brioche serve"
