#!/usr/bin/env python3
"""A random-weight Qwen 3.5 model for CPU speed checks (`brioche bench`):
the test fixture's layout (tests/fixtures/qwen35/dense: Gated DeltaNet and
gated attention layers, its tokenizer) at real linear-attention head sizes
(key and value heads of 128, 4 key / 8 value heads, conv kernel 4), hidden
512, 4 layers [linear, linear, linear, full], 16M parameters (f32).

Usage: python3 bench/qwen35_bench_model.py OUT_DIR
"""
import os
import shutil
import sys

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "qwen35", "dense")


def main(out):
    torch.manual_seed(0)
    config = Qwen3_5TextConfig(
        vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=8192,
        tie_word_embeddings=True,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=4,
        linear_num_value_heads=8,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        eos_token_id=2, pad_token_id=0, bos_token_id=None)
    model = Qwen3_5ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURE, f), os.path.join(out, f))
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1])
