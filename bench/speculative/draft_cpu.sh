#!/usr/bin/env bash
# Draft-model speculative decoding against plain decoding on the CPU, side
# by side: the default model converted to f32 at load (--weights-dtype f32)
# is the target, the same file as stored (Q4_1, about a fifth of the bytes)
# is the draft. Greedy; each prompt of this folder run with and without
# --draft-model alternately, ROUNDS times, through `brioche run`. Prints one
# line per run (brioche run's stderr summary) and checks that both settings
# generated the same text.
#   bash bench/speculative/draft_cpu.sh [BRIOCHE] [ROUNDS] [THREADS] [MODEL]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/cpu/brioche}
rounds=${2:-3}
threads=${3:-2}
model=${4:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
  for prompt in edit extract code; do
    for spec in none draft; do
      flags=()
      [ "$spec" = draft ] && flags=(--draft-model "$model")
      summary=$("$bin" run -m "$model" --weights-dtype f32 "${flags[@]}" -p "$(cat "$here/$prompt.txt")" \
        --temperature 0 --max-tokens 160 -t "$threads" 2>&1 >"$out/$prompt.$spec" | grep '^\[' | tr '\n' ' ')
      echo "round $round $prompt $spec $summary"
    done
    cmp -s "$out/$prompt.none" "$out/$prompt.draft" || { echo "$prompt: outputs differ" >&2; exit 1; }
  done
done
rm -rf "$out"
