# Run on a GPU machine from a directory holding brioche, gen_model and l3tok/
# (Llama-3's tokenizer.json, e.g. from the shared fixtures):
#   bash bench/serve_defaults/check.sh DIR
# Serves a random Llama-3-8B bf16 with the fitted defaults (--kv-mb 0,
# --max-batch-tokens 0), then with the old ones, under 64 clients x 256 tokens.
LOAD="$(dirname "$(readlink -f "$0")")/load.py"
cd "${1:-devcarry}"
set -x
./gen_model --shape llama3-8b --dtype bf16 --tokenizer-from l3tok --out /tmp/l8 >/dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total --format=csv
serve() { ./brioche serve -m /tmp/l8 --device cuda --port $1 "${@:2}" > /tmp/serve$1.log 2>&1 & for i in $(seq 90); do curl -s localhost:$1/health >/dev/null && break; sleep 1; done; head -3 /tmp/serve$1.log; }
serve 8090
nvidia-smi --query-gpu=memory.used --format=csv
curl -s localhost:8090/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}' | head -c 200; echo
curl -s localhost:8090/v1/completions -d '{"prompt":[1,4294967296]}'; echo
curl -s localhost:8090/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"logit_bias":{"128256":5}}'; echo
python3 "$LOAD" 8090 "fitted defaults"
curl -s localhost:8090/metrics | grep -E "^brioche_preempt"
pkill -f "brioche serve"; sleep 2
serve 8091 --kv-mb 256 --max-batch-tokens 512
python3 "$LOAD" 8091 "old defaults (--kv-mb 256 --max-batch-tokens 512)"
curl -s localhost:8091/metrics | grep -E "^brioche_preempt"
pkill -f "brioche serve"
