#!/usr/bin/env bash
# brioche vs llama.cpp (llama-cpp-python) on the same GGUF, same threads, in
# one run, alternating so both see the same machine state.
#   bench/cpu_vs_llama_cpp.sh [threads=2] [rounds=3]
# Needs: build/cpu/brioche, `pip install llama-cpp-python` (builds llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
ROUNDS=${2:-3}
MODEL=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
echo "model: $MODEL, threads: $THREADS, commit: $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  echo "--- round $round"
  build/cpu/brioche bench -m "$MODEL" -t "$THREADS" -p 128 -n 64 -r 3 | grep -E '^\| (pp|tg)'
  python3 bench/llama_cpp_peer.py --model "$MODEL" --threads "$THREADS" --prompt 128 --gen 64 --reps 3 | tail -1
done
