#!/usr/bin/env python3
"""Regenerate tests/backend/golden/quant_*.bin: weight blocks and their f32 values.

Oracles:
  * python `gguf` (gguf.quants) for the GGUF types. Its quantize() mirrors
    llama.cpp's reference quantizers for Q8_0/Q4_0/Q4_1, so for those the f32
    source rows are stored too and brioche's quantize_row must match byte for
    byte. gguf only dequantizes Q4_K/Q5_K/Q6_K, so for those random blocks with
    valid (finite, moderate) f16 scales are generated and dequantized by gguf.
  * numpy for MLX affine: quantized with mlx's affine formula, packed exactly
    as MLX packs uint32 words (element i of a word at bits bits*i), then
    repacked into brioche's self-contained blocks (f32 scale, f32 bias, q bytes).
  * A few real rows of the default model (SmolLM2-135M-Instruct Q4_1 GGUF):
    token_embd (Q8_0) and blk.0.ffn_gate (Q4_1), dequantized by gguf.

File format (little endian):
  b"BRQG1\n", provenance line, dtype name line, "rows cols\n", "has_src\n",
  then blocks [rows * row_bytes], values f32 [rows, cols], src f32 [rows, cols] if has_src.
"""
import os
import sys

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

T = gguf.GGMLQuantizationType
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "backend", "golden")
MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROVENANCE_FULL = ""  # set in main()


def gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


def write(name, dtype_name, blocks, values, src=None):
    rows, cols = values.shape
    with open(os.path.join(OUT, f"quant_{name}.bin"), "wb") as f:
        f.write(b"BRQG1\n")
        f.write(f"{PROVENANCE_FULL}\n".encode())
        f.write(f"{dtype_name}\n".encode())
        f.write(f"{rows} {cols}\n".encode())
        f.write(b"1\n" if src is not None else b"0\n")
        f.write(np.ascontiguousarray(blocks, dtype=np.uint8).tobytes())
        f.write(np.ascontiguousarray(values, dtype="<f4").tobytes())
        if src is not None:
            f.write(np.ascontiguousarray(src, dtype="<f4").tobytes())


def source_rows(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[1] *= 1e-3                  # tiny values
    x[2] = np.abs(x[2]) + 0.5     # all positive (Q4_1 min > 0)
    x[3, :64] = 0.0               # all-zero blocks
    x[4] *= 50.0                  # large values
    x[5, 7] = 40.0                # one outlier
    return x


def random_kquant_blocks(rng, qtype, n_blocks):
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    d = (rng.uniform(0.5, 2.0, n_blocks) * 1e-2).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    dmin = (rng.uniform(0.5, 2.0, n_blocks) * 1e-2).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    if qtype == T.Q6_K:
        b[:, 208:210] = d
    else:
        b[:, 0:2] = d
        b[:, 2:4] = dmin
    return b


def mlx_affine(rng, rows, cols, bits, group):
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    g = w.reshape(rows, cols // group, group)
    w_min, w_max = g.min(axis=2, keepdims=True), g.max(axis=2, keepdims=True)
    n_bins = (1 << bits) - 1
    scale = np.maximum((w_max - w_min) / n_bins, 1e-7).astype(np.float32)
    bias = w_min.astype(np.float32)
    q = np.clip(np.round((g - bias) / scale), 0, n_bins).astype(np.uint32)
    values = (scale * q.astype(np.float32) + bias).reshape(rows, cols)
    # MLX packing: per = 32 // bits values per uint32, value i at bits*i.
    per = 32 // bits
    qw = q.reshape(rows, cols // per, per)
    words = np.zeros((rows, cols // per), dtype=np.uint32)
    for i in range(per):
        words |= qw[:, :, i] << np.uint32(bits * i)
    word_bytes = words.astype("<u4").view(np.uint8).reshape(rows, cols // group, group * bits // 8)
    head = np.concatenate([scale.astype("<f4").view(np.uint8).reshape(rows, cols // group, 4),
                           bias.astype("<f4").view(np.uint8).reshape(rows, cols // group, 4)], axis=2)
    blocks = np.concatenate([head, word_bytes], axis=2).reshape(rows, -1)
    return blocks, values


def main():
    global PROVENANCE_FULL
    PROVENANCE_FULL = f"tools/oracle/quant_goldens.py gguf {gguf_version()} numpy {np.__version__}"
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240611)
    rows, cols = 8, 512
    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1):
        x = source_rows(rng, rows, cols)
        blocks = quantize(x, qtype)
        write(qtype.name.lower(), qtype.name.lower(), blocks, dequantize(blocks, qtype), x)
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        blocks = random_kquant_blocks(rng, qtype, rows * cols // 256).reshape(rows, -1)
        write(qtype.name.lower(), qtype.name.lower(), blocks, dequantize(blocks, qtype))
    for bits in (4, 8):
        for group in (32, 64, 128):
            blocks, values = mlx_affine(rng, rows, cols, bits, group)
            name = f"affine{bits}_g{group}"
            write(name, name, blocks, values)
    if os.path.exists(MODEL):
        reader = gguf.GGUFReader(MODEL)
        tensors = {t.name: t for t in reader.tensors}
        for tname, pick, name in (("token_embd.weight", [0, 1, 2, 100, 49151], "model_token_embd"),
                                  ("blk.0.ffn_gate.weight", [0, 1, 777, 1535], "model_ffn_gate")):
            t = tensors[tname]
            data = np.asarray(t.data)[pick]
            write(name, t.tensor_type.name.lower(), data, dequantize(data, t.tensor_type))
    else:
        print(f"warning: {MODEL} missing; model rows not regenerated", file=sys.stderr)


if __name__ == "__main__":
    main()
