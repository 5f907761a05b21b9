#!/usr/bin/env bash
# The reference design's experiment, end to end on the default model (CPU):
# curate preference pairs from an UltraFeedback-style file, train ORPO, and
# measure what the adapter did: IFEval before/after (paired interval, flipped
# prompts) and preference accuracy on the held-out split.
#   bench/ifeval_orpo/run.sh [OUT_DIR]      (BRIOCHE=path/to/brioche, ITERS, LIMIT, MAX_TOKENS, THREADS)
# Results recorded in BENCHMARKS.md, section ifeval-orpo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
BRIOCHE="${BRIOCHE:-build/cpu/brioche}"
MODEL="${MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
OUT="${1:-/tmp/ifeval_orpo}"
ITERS="${ITERS:-40}"
LIMIT="${LIMIT:-120}"
MAX_TOKENS="${MAX_TOKENS:-256}"
THREADS="${THREADS:-2}"
rm -rf "$OUT"
mkdir -p "$OUT"
python3 "$here/make_sample.py" >/dev/null  # the fixture is committed; this only proves it is reproducible
git -C "$here" diff --quiet -- ultrafeedback_sample.jsonl || { echo "ultrafeedback_sample.jsonl differs from make_sample.py's" >&2; exit 1; }

stamp() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f} s')"; }

echo "== curate"
t0=$(stamp)
"$BRIOCHE" data curate "$here/ultrafeedback_sample.jsonl" -m "$MODEL" -o "$OUT/pairs" \
  --min-gap 1 --max-tokens 512 --valid-fraction 0.2 --seed 1
echo "curate: $(elapsed "$t0" "$(stamp)")"

echo "== train ORPO ($ITERS steps)"
t0=$(stamp)
"$BRIOCHE" train -m "$MODEL" -d "$OUT/pairs" --method orpo --iters "$ITERS" --learning-rate 1e-4 \
  --threads "$THREADS" -o "$OUT/adapter" --seed 1
echo "train: $(elapsed "$t0" "$(stamp)")"

echo "== eval ifeval (base vs adapter, first $LIMIT prompts, $MAX_TOKENS tokens)"
t0=$(stamp)
"$BRIOCHE" eval ifeval -m "$MODEL" --adapter orpo="$OUT/adapter" --limit "$LIMIT" --max-tokens "$MAX_TOKENS" \
  -t "$THREADS" --out "$OUT/ifeval" --report "$OUT/ifeval.html"
echo "ifeval: $(elapsed "$t0" "$(stamp)")"

echo "== eval preference (held-out split)"
t0=$(stamp)
"$BRIOCHE" eval preference -m "$MODEL" -d "$OUT/pairs/valid.jsonl" --adapter orpo="$OUT/adapter" -t "$THREADS" \
  -o "$OUT/preference.json"
echo "preference: $(elapsed "$t0" "$(stamp)")"
