#!/usr/bin/env python3
"""Small safetensors fixtures for the brioche readers, written by the reference
`safetensors` package (torch for bf16), with expected values alongside.

tests/formats/fixtures/
  basic.safetensors            f32 [3,4], f16 [5], bf16 [2,3], i32 [4], u8 [3], __metadata__
  sharded/                     config.json, model.safetensors.index.json, two shards
  mlx_quant/                   config.json with MLX "quantization" (global 4-bit g32,
                               a per-layer 8-bit g64 override, lm_head: false) and
                               model.safetensors with packed u32 weights, scales, biases
  mlx_quant_expected.safetensors  the dequantized f32 weights (scales * q + biases)
tests/formats/golden/safetensors_basic.json  values of basic.safetensors as f32 lists

MLX packing (mlx/ops.cpp quantize): a row's b-bit integers q[j] go into uint32
words, element j at bit (j*b) % 32 of word (j*b) // 32, least significant first.

Run: python3 tools/oracle/formats_safetensors_fixtures.py
"""
import json
import os

import numpy as np
import torch
import safetensors
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/formats/fixtures")
TOOL = f"python safetensors {safetensors.__version__}, torch {torch.__version__}"


def mlx_pack(q: np.ndarray, bits: int) -> np.ndarray:
    """[rows, n] ints in [0, 2^bits) -> [rows, n*bits/32] uint32, MLX layout."""
    rows, n = q.shape
    per_word = 32 // bits
    words = np.zeros((rows, n // per_word), dtype=np.uint64)
    for j in range(n):
        words[:, j // per_word] |= q[:, j].astype(np.uint64) << np.uint64((j % per_word) * bits)
    return words.astype(np.uint32)


def mlx_quantized(rng, out_f, in_f, bits, group, scale_dtype):
    q = rng.integers(0, 2**bits, size=(out_f, in_f), dtype=np.int64)
    scales = torch.tensor(rng.uniform(0.01, 0.1, size=(out_f, in_f // group)), dtype=scale_dtype)
    biases = torch.tensor(rng.uniform(-0.5, 0.5, size=(out_f, in_f // group)), dtype=scale_dtype)
    s = scales.float().numpy().repeat(group, axis=1)
    b = biases.float().numpy().repeat(group, axis=1)
    expected = (s * q + b).astype(np.float32)  # w = scales * q + biases, per group
    packed = torch.from_numpy(mlx_pack(q, bits).view(np.int32)).view(torch.uint32)
    return packed, scales, biases, torch.from_numpy(expected)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(11)

    # basic
    basic = {
        "a.f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 2.0,
        "b.f16": torch.tensor([0.0, 1.5, -2.25, 65504.0, 6e-5], dtype=torch.float16),
        "c.bf16": torch.tensor([[1.0, -0.5, 3.140625], [256.0, -1e-3, 7.5]], dtype=torch.bfloat16),
        "d.i32": torch.tensor([1, -2, 2147483647, -2147483648], dtype=torch.int32),
        "e.u8": torch.tensor([0, 7, 255], dtype=torch.uint8),
    }
    save_file(basic, os.path.join(OUT, "basic.safetensors"), metadata={"format": "pt", "note": "brioche fixture"})
    golden = {"tool": TOOL, "values": {k: [float(x) for x in v.float().flatten()] for k, v in basic.items()},
              "shapes": {k: list(v.shape) for k, v in basic.items()}}
    with open(os.path.join(ROOT, "tests/formats/golden/safetensors_basic.json"), "w") as f:
        json.dump(golden, f, indent=1)

    # sharded
    sharded = os.path.join(OUT, "sharded")
    os.makedirs(sharded, exist_ok=True)
    shard1 = {"model.embed_tokens.weight": torch.arange(8, dtype=torch.float32).reshape(4, 2).to(torch.bfloat16),
              "model.layers.0.input_layernorm.weight": torch.ones(2, dtype=torch.bfloat16)}
    shard2 = {"lm_head.weight": (torch.arange(8, dtype=torch.float32).reshape(4, 2) * -1.0).to(torch.bfloat16)}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(shard1, os.path.join(sharded, names[0]), metadata={"format": "pt"})
    save_file(shard2, os.path.join(sharded, names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 40}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(sharded, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2,
                   "vocab_size": 4, "_generated_by": TOOL}, f, indent=1)

    # MLX quantized
    mlx = os.path.join(OUT, "mlx_quant")
    os.makedirs(mlx, exist_ok=True)
    q_w, q_s, q_b, q_exp = mlx_quantized(rng, 8, 64, 4, 32, torch.bfloat16)
    d_w, d_s, d_b, d_exp = mlx_quantized(rng, 4, 128, 8, 64, torch.float16)
    e_w, e_s, e_b, e_exp = mlx_quantized(rng, 6, 256, 4, 128, torch.float32)
    weights = {
        "model.layers.0.self_attn.q_proj.weight": q_w,
        "model.layers.0.self_attn.q_proj.scales": q_s,
        "model.layers.0.self_attn.q_proj.biases": q_b,
        "model.layers.0.mlp.down_proj.weight": d_w,
        "model.layers.0.mlp.down_proj.scales": d_s,
        "model.layers.0.mlp.down_proj.biases": d_b,
        "model.embed_tokens.weight": e_w,
        "model.embed_tokens.scales": e_s,
        "model.embed_tokens.biases": e_b,
        "model.norm.weight": torch.linspace(0.5, 1.5, 64, dtype=torch.float32),
        "lm_head.weight": torch.linspace(-1, 1, 3 * 64, dtype=torch.float32).reshape(3, 64),
    }
    save_file(weights, os.path.join(mlx, "model.safetensors"), metadata={"format": "mlx"})
    with open(os.path.join(mlx, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 64, "_generated_by": TOOL,
                   "quantization": {"group_size": 32, "bits": 4,
                                    "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8},
                                    "model.embed_tokens": {"group_size": 128, "bits": 4},
                                    "lm_head": False}}, f, indent=1)
    save_file({"model.layers.0.self_attn.q_proj": q_exp, "model.layers.0.mlp.down_proj": d_exp,
               "model.embed_tokens": e_exp},
              os.path.join(OUT, "mlx_quant_expected.safetensors"), metadata={"tool": TOOL})


if __name__ == "__main__":
    main()
