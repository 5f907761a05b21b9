#!/usr/bin/env bash
# 8 random rank-8 adapters of the default model, served unmerged on the CPU
# beside the base; load.py compares them with the base.
#   [TARGETS=q_proj,v_proj] [ADAPTERS=a0] [BIN=build/<dir>/brioche] bash bench/lora_serving/cpu.sh [THREADS]
# TARGETS: the projections adapted (default all seven); ADAPTERS: which of
# a0..a7 the adapter streams use.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
python3 - "$dir" "$repo" "${TARGETS:-}" <<'PY'
import sys; sys.path.insert(0, sys.argv[2] + "/tests/server")
from peft_adapter import write_adapter, MODULES
targets = tuple(sys.argv[3].split(",")) if sys.argv[3] else tuple(MODULES)
for i in range(8): write_adapter(f"{sys.argv[1]}/a{i}", seed=100 + i, targets=targets)
PY
"${BIN:-$repo/build/cpu/brioche}" serve --port 8397 -t "${1:-2}" --lora-dir "$dir" > "$dir/serve.log" 2>&1 &
pid=$!
for _ in $(seq 60); do curl -sf localhost:8397/health >/dev/null && break; sleep 0.5; done
python3 "$repo/bench/lora_serving/load.py" --port 8397 --adapters ${ADAPTERS:-a0,a1,a2,a3,a4,a5,a6,a7} --tokens 64 --rounds 3 --label "cpu, targets ${TARGETS:-all}"
