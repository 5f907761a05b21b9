#!/usr/bin/env bash
# Build every libFuzzer target (tests/fuzz) and run each for SECONDS over
# its committed corpus (tests/fuzz/corpus/<target without _fuzz>).
# Usage: scripts/fuzz.sh [SECONDS=30] [TARGET...]   (FUZZ_TIMEOUT: seconds one input may take, default 10;
# raise it for long runs at low priority beside other work, where a starved
# process would report slow inputs that are not)
# New inputs go to build/fuzz/corpus/<name> (the committed corpus is only
# read); a crash leaves its input in build/fuzz/crashes/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"; shift || true
build="${FUZZ_BUILD_DIR:-build/fuzz}"
if [[ ! -f $build/build.ninja ]]; then
  cmake -B $build -G Ninja -DBRIOCHE_FUZZ=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
fi
if (( $# )); then targets=("$@"); else
  mapfile -t targets < <(ls tests/fuzz/*_fuzz.cpp | xargs -n1 basename | sed 's/\.cpp$//')
fi
echo "fuzz: building ${targets[*]}"
cmake --build $build --target "${targets[@]}" >/dev/null
mkdir -p $build/crashes
status=0
for t in "${targets[@]}"; do
  name="${t%_fuzz}"
  seeds="tests/fuzz/corpus/$name"
  work="$build/corpus/$name"
  mkdir -p "$work" "$seeds"
  dict=(); [[ -f "tests/fuzz/$name.dict" ]] && dict=(-dict="tests/fuzz/$name.dict")
  log="$build/$t.log"
  if "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=4096 -max_len=65536 \
       -artifact_prefix="$build/crashes/$t-" "${dict[@]}" "$work" "$seeds" >"$log" 2>&1; then
    echo "fuzz: $t ok: $(grep -E '^#[0-9]+.*DONE' "$log" | tail -1 | awk '{print $1, "runs,", $4, "coverage"}') in ${seconds}s"
  else
    status=1
    echo "fuzz: $t FOUND A CRASH (log: $log):"; grep -E 'ERROR|SUMMARY|==ERROR' "$log" | head -5
  fi
done
exit $status
