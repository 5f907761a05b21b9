#!/usr/bin/env python3
"""MLX quantized Gemma 4 and Qwen 3.5 directories, made by mlx-lm itself, and
their goldens from transformers on the dequantized weights.

mlx (the `mlx[cpu]` wheel runs on Linux x86-64) and mlx-lm write the files
exactly as users get them from `mlx_lm.convert -q`: packed u32 words,
scales and biases per group, mlx-lm's names (`language_model.model.*`,
`switch_mlp` / `switch_glu` stacked experts, conv1d as [C, K, 1], Qwen's
zero-centred norms stored as 1 + w) and config.json's `quantization` block
with per-module overrides. Each fixture is quantized with a custom
quant_predicate that gives some modules other bits and group sizes
(mixed-precision quants like the reference's ...-OptiQ-4bit do the same),
so every bit width MLX has (2, 3, 4, 5, 6, 8) and group 32/64/128 occur.

Sources (random weights, transformers 5.25's own classes):
  qwen35/dense, qwen35/moe  the existing HF fixtures (tools/oracle/qwen35_oracle.py),
                            given the released checkpoints' multimodal config
                            layout (model_type qwen3_5[_moe] + text_config)
  gemma4 ple                 built here: Gemma4ForCausalLM at quantizable sizes
                            (hidden 64): per-layer inputs, KV-shared layers,
                            double-wide MLP, sliding + full layers, tied
  gemma4 moe                 built here: Gemma4ForConditionalGeneration: MoE
                            block (4 experts, top 2), attention_k_eq_v

Fixtures: tests/fixtures/{qwen35,gemma4}/mlx-<name>/ (config.json,
model.safetensors, tokenizer files as mlx-lm saved them) and
mlx-<name>/golden.json + golden_logits.f32: the logits of every row of each
prompt, computed by transformers in f64 with every weight replaced by the
dequantized MLX value (scale · q + bias in f64 from the stored words; the
unquantized tensors as stored). mlx-lm's own forward of the same files is
compared too and printed (an independent reading of the names and layout).

Usage: python3 tools/oracle/mlx_fixtures.py   (CPU, about a minute)
Needs: mlx[cpu] and mlx-lm (pip install --no-deps mlx-lm: its transformers
pin is not needed for convert), transformers, torch, safetensors.
"""
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors import safe_open

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")


def versions():
    v = {k: importlib.metadata.version(k) for k in ("mlx", "mlx-lm", "transformers", "torch", "safetensors")}
    v["script"] = "tools/oracle/mlx_fixtures.py"
    return v


# ---- MLX's affine format, read back in numpy -------------------------------------------------


def unpack(words, bits):
    """u32 words [..., in*bits/32] -> q [..., in]: element j at bit j*bits of
    the little-endian byte stream (checked against mx.dequantize below)."""
    b = np.ascontiguousarray(words).view(np.uint8)
    stream = np.unpackbits(b, axis=-1, bitorder="little")
    n = stream.shape[-1] // bits
    v = stream.reshape(*stream.shape[:-1], n, bits).astype(np.int64)
    return (v << np.arange(bits)).sum(-1)


def dequantize(words, scales, biases, bits, group):
    q = unpack(words, bits).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), group, axis=-1)
    b = np.repeat(biases.astype(np.float64), group, axis=-1)
    return q * s + b


def read_mlx_dir(path):
    """{name: float64 array} with every quantized module dequantized."""
    cfg = json.load(open(os.path.join(path, "config.json")))
    quant = cfg["quantization"]
    raw = {}
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            raw[k] = t.view(torch.int32).numpy().view(np.uint32) if t.dtype == torch.uint32 else t.double().numpy()
    out, used = {}, {}
    for k in raw:
        if k.endswith(".scales"):
            p = k[: -len(".scales")]
            spec = quant.get(p, quant)
            bits, group = spec["bits"], spec["group_size"]
            out[p + ".weight"] = dequantize(raw[p + ".weight"], raw[k], raw[p + ".biases"], bits, group)
            used[p] = (bits, group)
    for k, v in raw.items():
        p = k.rsplit(".", 1)[0]
        if p in used:
            continue
        out[k] = v
    return cfg, out, used


# ---- the quantization plans -------------------------------------------------------------------


def predicate_from(overrides, default):
    """mlx-lm quant_predicate: the first override whose key is a suffix of
    the module path gives its bits/group; others take the default (which
    mlx-lm writes into config.json per module only for the overrides)."""
    def predicate(path, module, *rest):
        for suffix, spec in overrides:
            if path.endswith(suffix):
                return spec
        return default(path) if default else True
    return predicate


def convert(src, dst, bits, group, overrides, default=None):
    from mlx_lm.convert import convert as mlx_convert
    shutil.rmtree(dst, ignore_errors=True)
    mlx_convert(src, dst, quantize=True, q_group_size=group, q_bits=bits, dtype="bfloat16",
                quant_predicate=predicate_from(overrides, default))
    for extra in os.listdir(dst):  # what brioche does not read
        if extra not in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                         "chat_template.jinja"):
            os.remove(os.path.join(dst, extra))


# ---- sources ----------------------------------------------------------------------------------


def qwen_source(name, tmp):
    """The HF fixture with the released checkpoints' config layout (the text
    settings under text_config), which is the form mlx-lm converts."""
    src = os.path.join(FIX, "qwen35", name)
    dst = os.path.join(tmp, "qwen-" + name)
    os.makedirs(dst)
    text = json.load(open(os.path.join(src, "config.json")))
    moe = "moe" in text["model_type"]
    # mlx-lm places full attention by full_attention_interval alone (not
    # layer_types); the fixture's [linear, full, linear, full] is interval 2.
    text["full_attention_interval"] = 2
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
           "model_type": "qwen3_5_moe" if moe else "qwen3_5", "text_config": text,
           "tie_word_embeddings": text["tie_word_embeddings"], "dtype": "float32"}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    # The released MoE checkpoints stack the experts (experts.gate_up_proj
    # [E, 2I, H], experts.down_proj [E, H, I]), the form mlx-lm reads.
    from safetensors.torch import save_file
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    for layer in range(text["num_hidden_layers"]):
        p = f"model.layers.{layer}.mlp.experts."
        if p + "0.gate_proj.weight" not in tensors:
            continue
        e = range(text["num_experts"])
        gate_up = [torch.cat([tensors.pop(f"{p}{i}.gate_proj.weight"), tensors.pop(f"{p}{i}.up_proj.weight")]) for i in e]
        tensors[p + "gate_up_proj"] = torch.stack(gate_up)
        tensors[p + "down_proj"] = torch.stack([tensors.pop(f"{p}{i}.down_proj.weight") for i in e])
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst, text


def gemma_sources(tmp):
    from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig
    import gemma4_oracle as g4
    common = dict(vocab_size=g4.VOCAB, hidden_size=64, intermediate_size=64, num_attention_heads=2,
                  max_position_embeddings=512, rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1,
                  bos_token_id=2, vocab_size_per_layer_input=g4.VOCAB)
    ple = Gemma4TextConfig(
        **common, num_hidden_layers=4, num_key_value_heads=1, head_dim=32, global_head_dim=64,
        sliding_window=6, layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        hidden_size_per_layer_input=16, num_kv_shared_layers=2, use_double_wide_mlp=True,
        final_logit_softcapping=30.0, tie_word_embeddings=True)
    moe_text = Gemma4TextConfig(
        **common, num_hidden_layers=3, num_key_value_heads=2, head_dim=32, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=7,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], hidden_size_per_layer_input=0,
        enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=64,
        final_logit_softcapping=30.0, tie_word_embeddings=True)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=8, patch_size=4, pooling_kernel_size=2, position_embedding_size=16)
    moe = Gemma4Config(text_config=moe_text.to_dict(), vision_config=vision, audio_config=None)
    out = []
    for i, (name, config, cls) in enumerate([("ple", ple, Gemma4ForCausalLM),
                                             ("moe", moe, Gemma4ForConditionalGeneration)]):
        torch.manual_seed(500 + i)
        config._attn_implementation = "eager"
        text = config.get_text_config()
        model = cls(config).float().eval()
        g4.randomize(model, 500 + i)
        model.tie_weights()
        dst = os.path.join(tmp, "gemma-" + name)
        model.save_pretrained(dst, safe_serialization=True)
        g4.make_tokenizer(dst)
        hub_form(os.path.join(dst, "config.json"))
        out.append((name, dst, cls))
    return out


def hub_form(config_path):
    """The hub's spelling of the full layers' shape (global_head_dim,
    num_global_key_value_heads), which mlx-lm reads, instead of
    transformers 5.25's per_layer_config (gemma4_oracle.hub_form, also
    under text_config)."""
    cfg = json.load(open(config_path))
    text = cfg.get("text_config", cfg)
    overrides = text.pop("per_layer_config", None)
    if overrides:
        (head_dim,) = {v.get("head_dim", text["head_dim"]) for v in overrides.values()}
        text["global_head_dim"] = head_dim
        (kv,) = {v.get("num_key_value_heads") for v in overrides.values()}
        if kv is not None:
            text["num_global_key_value_heads"] = kv
    if "text_config" in cfg:  # the hub's multimodal configs repeat it at the top (mlx-lm reads it there)
        cfg["vocab_size"] = text["vocab_size"]
    json.dump(cfg, open(config_path, "w"), indent=2)


# ---- goldens ----------------------------------------------------------------------------------


def hf_state_from_mlx(weights, family, nested_gemma):
    """mlx-lm names and layout -> transformers' (the inverse of mlx-lm's
    sanitize for these models)."""
    sd = {}
    for k, v in weights.items():
        if family == "qwen":
            k = k.replace("language_model.model.", "model.").replace("language_model.lm_head", "lm_head")
            if "conv1d.weight" in k:
                v = np.moveaxis(v, 2, 1)  # [C, K, 1] -> [C, 1, K]
            if v.ndim == 1 and k.endswith(("input_layernorm.weight", "post_attention_layernorm.weight",
                                            "model.norm.weight", "q_norm.weight", "k_norm.weight")):
                v = v - 1.0  # mlx-lm stores the zero-centred norm's 1 + w
        elif nested_gemma:
            k = k.replace("language_model.model.", "model.language_model.")
        sd[k] = v
    # Stacked experts -> transformers' gate_up_proj [E, 2I, H] and down_proj [E, H, I].
    for k in [k for k in sd if k.endswith(("switch_mlp.gate_proj.weight", "switch_glu.gate_proj.weight"))]:
        base = k.rsplit(".", 3)[0]
        mid = "switch_mlp" if "switch_mlp" in k else "switch_glu"
        gate, up = sd.pop(f"{base}.{mid}.gate_proj.weight"), sd.pop(f"{base}.{mid}.up_proj.weight")
        down = sd.pop(f"{base}.{mid}.down_proj.weight")
        root = base if family == "qwen" else base  # qwen: <layer>.mlp.experts ; gemma: <layer>.experts
        if family == "qwen":
            root = base + ".experts"
        sd[root + ".gate_up_proj"] = np.concatenate([gate, up], axis=-2)
        sd[root + ".down_proj"] = down
    return sd


def load_into(model, sd):
    state = model.state_dict()
    unknown = [k for k in sd if k not in state]
    assert not unknown, f"MLX tensors with no transformers parameter: {unknown[:5]}"
    with torch.no_grad():
        for k, v in sd.items():
            assert tuple(state[k].shape) == v.shape, (k, state[k].shape, v.shape)
            state[k].copy_(torch.from_numpy(np.ascontiguousarray(v)))
    return [k for k in state if k not in sd]


def prompts(seed, vocab):
    g = np.random.default_rng(seed)
    return [[2] + [int(x) for x in g.integers(6, vocab, n - 1)] for n in (7, 40)]


def mlx_lm_logits(path, ids):
    import mlx.core as mx
    from mlx_lm.utils import load
    model, _ = load(path)
    model.set_dtype(mx.float32)  # f32 activations (the file's bf16 values are exact in f32)
    return np.array(model(mx.array([ids])).astype(mx.float32))[0]


def golden(dst, hf_model, family, nested_gemma, source_cfg):
    cfg, weights, used = read_mlx_dir(dst)
    sd = hf_state_from_mlx(weights, family, nested_gemma)
    untouched = load_into(hf_model, sd)
    hf_model = hf_model.double().eval()
    vocab = source_cfg["vocab_size"]
    ps = prompts(77, vocab)
    rows, mlx_err = [], 0.0
    for ids in ps:
        with torch.no_grad():
            logits = hf_model(input_ids=torch.tensor([ids])).logits[0].numpy()
        rows.append(logits.astype("<f4"))
        theirs = mlx_lm_logits(dst, ids)
        mlx_err = max(mlx_err, float(np.abs(theirs - logits).max() / np.abs(logits).max()))
    np.concatenate(rows).tofile(os.path.join(dst, "golden_logits.f32"))
    bits = sorted({b for b, _ in used.values()})
    groups = sorted({g for _, g in used.values()})
    out = {"prompts": ps, "vocab_size": vocab, "logits_file": "golden_logits.f32",
           "logits_layout": "[sum of prompt lengths, vocab] f32 little-endian, every row, prompts in order",
           "quantized_modules": len(used), "bits": bits, "group_sizes": groups,
           "not_in_file": sorted(k for k in untouched if "vision" not in k),
           "mlx_lm_forward_max_rel_err": mlx_err, "produced_by": versions()}
    json.dump(out, open(os.path.join(dst, "golden.json"), "w"), indent=1)
    print(f"{dst}: {len(used)} quantized modules, bits {bits}, groups {groups}, "
          f"logit std {np.concatenate(rows).std():.3f}, mlx-lm forward vs transformers {mlx_err:.2e}",
          file=sys.stderr)


def check_unpack():
    import mlx.core as mx
    w = mx.random.normal((3, 128))
    for bits in (2, 3, 4, 5, 6, 8):
        q, s, b = mx.quantize(w, group_size=32, bits=bits)
        mine = dequantize(np.array(q), np.array(s), np.array(b), bits, 32)
        assert np.abs(mine - np.array(mx.dequantize(q, s, b, group_size=32, bits=bits))).max() < 1e-5, bits


def main():
    torch.set_num_threads(2)
    check_unpack()
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    with tempfile.TemporaryDirectory() as tmp:
        # Qwen 3.5 dense: 4-bit groups of 64, with 8/6/5/3/2-bit and group 32/128 overrides.
        src, text = qwen_source("dense", tmp)
        dst = os.path.join(FIX, "qwen35", "mlx-dense")
        convert(src, dst, 4, 64, [
            ("layers.0.mlp.down_proj", {"group_size": 64, "bits": 8}),
            ("layers.1.self_attn.o_proj", {"group_size": 32, "bits": 6}),
            ("layers.1.self_attn.q_proj", {"group_size": 32, "bits": 8}),
            ("layers.2.linear_attn.in_proj_qkv", {"group_size": 32, "bits": 3}),
            ("layers.3.mlp.up_proj", {"group_size": 64, "bits": 5}),
            ("layers.3.mlp.gate_proj", {"group_size": 32, "bits": 2}),
            ("layers.0.linear_attn.in_proj_b", False),  # left in bf16
        ])
        cfg = Qwen3_5TextConfig(**{k: v for k, v in text.items() if k not in ("architectures", "model_type")})
        golden(dst, Qwen3_5ForCausalLM(cfg).float(), "qwen", False, text)

        # Qwen 3.5 MoE: 8-bit groups of 32 (mlx-lm's own predicate puts the
        # router and shared_expert_gate at 8 bits, groups of 64).
        src, text = qwen_source("moe", tmp)
        dst = os.path.join(FIX, "qwen35", "mlx-moe")
        convert(src, dst, 8, 32, [("mlp.gate", {"group_size": 64, "bits": 8}),
                                  ("shared_expert_gate", {"group_size": 64, "bits": 8}),
                                  ("layers.1.mlp.switch_mlp.up_proj", {"group_size": 32, "bits": 4})])
        cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in text.items() if k not in ("architectures", "model_type")})
        cfg._experts_implementation = "eager"
        golden(dst, Qwen3_5MoeForCausalLM(cfg).float(), "qwen", False, text)

        # Gemma 4.
        for name, src, cls in gemma_sources(tmp):
            dst = os.path.join(FIX, "gemma4", "mlx-" + name)
            if name == "ple":
                convert(src, dst, 4, 32, [
                    ("layers.0.mlp.down_proj", {"group_size": 64, "bits": 8}),
                    ("layers.1.self_attn.q_proj", {"group_size": 64, "bits": 6}),
                    ("embed_tokens_per_layer", {"group_size": 32, "bits": 8}),
                    ("layers.3.mlp.down_proj", {"group_size": 128, "bits": 3}),
                ])
            else:
                convert(src, dst, 4, 64, [
                    ("router.proj", {"group_size": 64, "bits": 8}),
                    ("layers.0.experts.switch_glu.down_proj", {"group_size": 32, "bits": 8}),
                    ("layers.1.experts.switch_glu.up_proj", {"group_size": 64, "bits": 8}),  # gate stays 4-bit
                    ("layers.2.self_attn.o_proj", {"group_size": 64, "bits": 5}),
                ])
            config = json.load(open(os.path.join(src, "config.json")))
            model = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
            if name == "moe":
                model.config.get_text_config()._experts_implementation = "eager"
            text = config.get("text_config", config)
            golden(dst, model, "gemma", name == "moe", text)


if __name__ == "__main__":
    main()
