#!/bin/bash
# Decode b1 under several settings in alternation (one binary, environment
# switches), for A/B runs on a noisy machine: each model runs every setting,
# then every setting again.
#   bash bench/cuda_decode_ab.sh "SETTING" ... -- shape:dtype:steps ...
# A setting is "" (the defaults) or VAR=value[,VAR=value]; BENCH=path runs
# another cuda_model_bench (an older build, for before/after). Needs
# build/dev (bench/cuda_pack.sh), carried.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build/dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
shift
for model in "$@"; do
  IFS=: read -r shape dtype steps <<< "$model"
  for round in 1 2; do
    for s in "${settings[@]}"; do
      bench=build/dev/cuda_model_bench
      [[ "$s" =~ BENCH=([^,]*) ]] && bench=${BASH_REMATCH[1]}
      # Three rows a run, on one line, each named: "decode b1" (each step
      # waits for the host's token), "decode b1 run ahead" (the engine's way,
      # the headline number), "decode b1 forward alone".
      tokens=$(env ${s//,/ } $bench --shape "$shape" --dtype "$dtype" --decode "${steps:-128}" \
        --prefill 0 --batch 0 2>&1 | grep "decode b1" |
        awk -F'|' '{name = $(NF-3); sub(/^ *decode b1 */, "", name); sub(/ *$/, "", name);
                    printf "%s%s %s", (NR > 1 ? " | " : ""), (name == "" ? "waiting" : name), $(NF-2) + 0}')
      echo "$shape $dtype round $round [${s:-default}]: $tokens" | tee -a "$out/ab.txt"
    done
  done
done
