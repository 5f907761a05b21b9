#!/usr/bin/env bash
# `brioche train` ORPO on a random Llama-3-8B (bf16) at the bench's shape
# (2,048-word shared prompt, 4,050-word responses), the issue-48 levers, and
# the per-step times from its log (step_times.py). Usage, on the GPU machine:
#   bench/train_cli/h200.sh BRIOCHE GEN_MODEL TOKENIZER_DIR [extra train flags]
set -euo pipefail
B=$1 GEN=$2 TOK=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
[[ -d /tmp/l8 ]] || "$GEN" --shape llama3-8b --dtype bf16 --tokenizer-from "$TOK" --out /tmp/l8 >/dev/null
python3 "$here/make_pairs.py" /tmp/pairs4k --pairs 6 --prompt-words 2000 --response-words 4050
rm -rf /tmp/orpo4k
/usr/bin/time -f "wall %e s, max RSS %M KB" "$B" train -m /tmp/l8 -d /tmp/pairs4k -o /tmp/orpo4k --device cuda \
  --method orpo --rank 16 --prefix-shared --segment-size 1 --offload-boundaries --offload-attention \
  --max-seq-length 8192 --steps-per-report 1 -q "$@" 2>&1 | grep -v "^$" | tail -20
python3 "$here/step_times.py" /tmp/orpo4k/log.jsonl
