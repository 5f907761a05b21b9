#!/usr/bin/env bash
# Prompt-lookup speculative decoding against plain decoding on the CPU, side
# by side: the default model, greedy, each prompt of this folder run with
# `--speculative none` and `--speculative prompt-lookup` alternately, ROUNDS
# times. Prints one line per run (brioche run's stderr summary) and checks
# that both settings generated the same text.
#   bash bench/speculative/cpu.sh [BRIOCHE] [ROUNDS] [THREADS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/cpu/brioche}
rounds=${2:-3}
threads=${3:-2}
out=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
  for prompt in edit extract code; do
    for spec in none prompt-lookup; do
      summary=$("$bin" run -p "$(cat "$here/$prompt.txt")" --temperature 0 --max-tokens 160 -t "$threads" \
        --speculative "$spec" 2>&1 >"$out/$prompt.$spec" | grep '^\[' | tr '\n' ' ')
      echo "round $round $prompt $spec $summary"
    done
    cmp -s "$out/$prompt.none" "$out/$prompt.prompt-lookup" || { echo "$prompt: outputs differ" >&2; exit 1; }
  done
done
rm -rf "$out"
