#!/usr/bin/env bash
# Formats the C++/CUDA sources with the repository's .clang-format, or with
# --check lists the files that differ and fails (what .ci/run does).
#   scripts/format.sh            format every tracked source in place
#   scripts/format.sh --check    exit 1 when any file is not formatted
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
# .inc files are fragments included mid-function: formatted as a whole file
# they would be indented wrongly, so they are left as written.
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cpp' 'tests/*.h' \
                                  'tools/*.cpp' 'tools/*.h' 'bench/*.cpp' 'bench/*.h' 'bench/*.cu')
case "${1:-}" in
  "" | --check) ;;
  *) echo "format: unknown argument '$1' (none formats every tracked source in place; --check only checks)"; exit 2 ;;
esac
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then echo "format: not formatted: $f"; bad=1; fi
  done
  [[ $bad == 0 ]] && echo "format: ${#files[@]} files formatted"
  exit $bad
fi
clang-format -i "${files[@]}"
echo "format: ${#files[@]} files formatted in place"
