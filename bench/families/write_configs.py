#!/usr/bin/env python3
"""Writes bench/families/configs/<shape>.json: each shape's config.json as
transformers 5.25 itself writes it (`config.save_pretrained`), so that
make_model.py (which runs where transformers is not installed) copies the
exact file. Run here, where transformers is installed; the outputs are
committed.

Real shapes (the released checkpoints' text models; Gemma 4 has no 12B: the
family is E2B, E4B, 26B-A4B and 31B):
  gemma4-e4b       google/gemma-4-E4B: hidden 2560, 42 layers ([5 sliding, 1 full] x 7),
                   8 heads, 2 kv heads, head dim 256 (sliding) / 512 (full), MLP 10240,
                   per-layer inputs 256, the last 18 layers KV-shared, window 512, softcap 30
  gemma4-31b       google/gemma-4-31B: hidden 5376, 60 layers ([5, 1] x 10), 32 heads,
                   16 kv heads (sliding) / 4 (full, attention_k_eq_v), MLP 21504, window 1024
  qwen3.5-9b       Qwen/Qwen3.5-9B: hidden 4096, 32 layers ([3 linear, 1 full] x 8),
                   16 heads, 4 kv heads, head dim 256, MLP 12288, DeltaNet 16 key / 32 value
                   heads of 128, untied head, vocab 248,320
  qwen3.5-35b-a3b  Qwen/Qwen3.5-35B-A3B: hidden 2048, 40 layers, 16 heads, 2 kv heads,
                   256 experts of 512 (top 8) + a shared expert of 512
The `-tiny` shapes switch on the same features at small sizes (vocabularies
of the fixture tokenizers) for checks on a CPU.

  python3 bench/families/write_configs.py
"""
import json
import os
import tempfile

from transformers import Gemma4TextConfig, Qwen3_5MoeTextConfig, Qwen3_5TextConfig

HERE = os.path.dirname(os.path.abspath(__file__))

GEMMA_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}
QWEN_ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
             "mrope_section": [11, 11, 10], "mrope_interleaved": True}


def gemma_types(n_layers, period):
    return [("full_attention" if (i + 1) % period == 0 else "sliding_attention") for i in range(n_layers)]


def qwen_types(n_layers):
    return [("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(n_layers)]


def gemma4(**kw):
    common = dict(vocab_size=262144, vocab_size_per_layer_input=262144, rms_norm_eps=1e-6,
                  max_position_embeddings=131072, final_logit_softcapping=30.0, tie_word_embeddings=True,
                  hidden_activation="gelu_pytorch_tanh", rope_parameters=GEMMA_ROPE, pad_token_id=0,
                  bos_token_id=2, eos_token_id=1, enable_moe_block=False, use_double_wide_mlp=False)
    common.update(kw)
    c = Gemma4TextConfig(**common)
    c.architectures = ["Gemma4ForCausalLM"]
    return c


def qwen(moe, **kw):
    common = dict(vocab_size=248320, rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=False,
                  rope_parameters=QWEN_ROPE, linear_conv_kernel_dim=4, eos_token_id=248044)
    common.update(kw)
    c = (Qwen3_5MoeTextConfig if moe else Qwen3_5TextConfig)(**common)
    c.architectures = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
    return c


SHAPES = {
    "gemma4-e4b": gemma4(hidden_size=2560, num_hidden_layers=42, intermediate_size=10240, num_attention_heads=8,
                         num_key_value_heads=2, head_dim=256, global_head_dim=512, sliding_window=512,
                         layer_types=gemma_types(42, 6), hidden_size_per_layer_input=256, num_kv_shared_layers=18,
                         attention_k_eq_v=False),
    "gemma4-31b": gemma4(hidden_size=5376, num_hidden_layers=60, intermediate_size=21504, num_attention_heads=32,
                         num_key_value_heads=16, num_global_key_value_heads=4, head_dim=256, global_head_dim=512,
                         sliding_window=1024, layer_types=gemma_types(60, 6), hidden_size_per_layer_input=0,
                         num_kv_shared_layers=0, attention_k_eq_v=True),
    # e4b's features: per-layer inputs, KV-shared layers, head dims 32/64, window 8
    "gemma4-tiny": gemma4(vocab_size=320, vocab_size_per_layer_input=320, hidden_size=64, num_hidden_layers=6,
                          intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                          global_head_dim=64, sliding_window=8, layer_types=gemma_types(6, 3),
                          hidden_size_per_layer_input=16, num_kv_shared_layers=2, attention_k_eq_v=False,
                          max_position_embeddings=4096),
    # 31b's features: attention_k_eq_v with fewer kv heads on full layers, no per-layer inputs
    "gemma4-tiny-keqv": gemma4(vocab_size=320, vocab_size_per_layer_input=320, hidden_size=64, num_hidden_layers=6,
                               intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                               num_global_key_value_heads=1, head_dim=32, global_head_dim=64, sliding_window=8,
                               layer_types=gemma_types(6, 3), hidden_size_per_layer_input=0, num_kv_shared_layers=0,
                               attention_k_eq_v=True, max_position_embeddings=4096),
    "qwen3.5-9b": qwen(False, hidden_size=4096, num_hidden_layers=32, intermediate_size=12288, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128,
                       linear_num_key_heads=16, linear_num_value_heads=32, layer_types=qwen_types(32)),
    "qwen3.5-35b-a3b": qwen(True, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                            num_key_value_heads=2, head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128,
                            linear_num_key_heads=16, linear_num_value_heads=32, moe_intermediate_size=512,
                            shared_expert_intermediate_size=512, num_experts=256, num_experts_per_tok=8,
                            layer_types=qwen_types(40)),
    "qwen3.5-tiny": qwen(False, vocab_size=512, hidden_size=64, num_hidden_layers=4, intermediate_size=128,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_key_head_dim=32,
                         linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                         layer_types=qwen_types(4), eos_token_id=2, max_position_embeddings=4096),
    "qwen3.5-moe-tiny": qwen(True, vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=32, linear_key_head_dim=32, linear_value_head_dim=32,
                             linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
                             shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
                             layer_types=qwen_types(4), eos_token_id=2, max_position_embeddings=4096),
}


def main():
    out = os.path.join(HERE, "configs")
    os.makedirs(out, exist_ok=True)
    for name, config in SHAPES.items():
        config.dtype = "bfloat16"
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            with open(os.path.join(tmp, "config.json")) as f:
                text = f.read()
        json.loads(text)
        with open(os.path.join(out, name + ".json"), "w") as f:
            f.write(text)
        print("wrote", name)


if __name__ == "__main__":
    main()
