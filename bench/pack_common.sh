#!/bin/bash
# Shared steps of the bench/*_pack.sh scripts, which copy CUDA binaries built
# here into an ignored folder under build/ that is carried to the device
# machine (docs/cuda.md). Source it: `source "$(dirname "$0")/pack_common.sh"`.

# copy_runtime_libs DST BINARY...: the shared libraries the binaries load that
# the device image lacks, into DST/lib. The C/C++ runtime and the driver are
# there; CUDA's own libraries come from /usr/local/cuda there and NCCL from
# its PyTorch wheel (see the run scripts' LD_LIBRARY_PATH).
copy_runtime_libs() {
  local dst=$1 lib
  shift
  mkdir -p "$dst/lib"
  for lib in $(ldd "$@" | awk '/=>/ {print $3}' | sort -u); do
    case "$lib" in
      */libstdc++*|*/libcudart*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libgcc_s*|*/libcuda.so*|*/libnccl*) ;;
      /usr/local/cuda*) ;;
      *) cp -L "$lib" "$dst/lib/" ;;
    esac
  done
}

# pack_tokenizer GEN_MODEL DST: the default model's tokenizer alone
# (tokenizer.* keys, no weights) as DST/smollm2-tokenizer.gguf, for
# random-weight models that run through the CLI on the device
# (`gen_model --tokenizer-from`). Skipped when the default model is absent.
pack_tokenizer() {
  local model=${BRIOCHE_MODEL:-$HOME/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf}
  [ -f "$model" ] || return 0
  "$1" --tokenizer-only --tokenizer-from "$model" --out "$2/smollm2-tokenizer.gguf"
}
