#!/usr/bin/env python3
"""Golden logits for tests/model from Hugging Face transformers (torch, f32).

(a) smollm2: the default GGUF model, dequantized with the python `gguf`
    package, Q/K rows un-permuted back to Hugging Face order, loaded into a
    transformers LlamaForCausalLM built from the GGUF metadata. Records the
    last-row logits of a few prompts and 64 greedy tokens per prompt.
(b) tiny random-weight checkpoints written by transformers save_pretrained
    (safetensors, f32): llama with llama3 RoPE scaling, mistral with a sliding
    window, qwen2 with qkv bias, qwen3 with q/k norm and tied embeddings.
    Records logits of every prompt row.

Usage: python3 tools/oracle/model_goldens.py [--model PATH] [--skip-gguf]
Writes tests/model/golden/{smollm2.json, smollm2_logits.f32, tiny_<arch>/...}.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "model", "golden")
DEFAULT_MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def versions():
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "gguf": getattr(gguf, "__version__", "unknown"), "numpy": np.__version__,
            "script": "tools/oracle/model_goldens.py"}


def field(reader, key):
    return reader.fields[key].contents()


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf's permute(): rows of each head
    go from interleaved pairs (2i, 2i+1) back to halves (i, i + d/2)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def smollm2(model_path):
    reader = gguf.GGUFReader(model_path)
    arch = field(reader, "general.architecture")
    assert arch == "llama", arch
    n_head = int(field(reader, "llama.attention.head_count"))
    n_kv = int(field(reader, "llama.attention.head_count_kv"))
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))  # ggml ne reversed = row-major
        tensors[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    hidden = int(field(reader, "llama.embedding_length"))
    vocab = tensors["token_embd.weight"].shape[0]
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden,
        intermediate_size=int(field(reader, "llama.feed_forward_length")),
        num_hidden_layers=int(field(reader, "llama.block_count")),
        num_attention_heads=n_head, num_key_value_heads=n_kv,
        rms_norm_eps=float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(field(reader, "llama.rope.freq_base")),
        max_position_embeddings=int(field(reader, "llama.context_length")),
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = transformers.LlamaForCausalLM(config).float().eval()
    sd = {"model.embed_tokens.weight": tensors["token_embd.weight"],
          "model.norm.weight": tensors["output_norm.weight"]}
    if "output.weight" in tensors:
        sd["lm_head.weight"] = tensors["output.weight"]
    for i in range(config.num_hidden_layers):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = tensors[b + "attn_norm.weight"]
        sd[p + "self_attn.q_proj.weight"] = unpermute(tensors[b + "attn_q.weight"], n_head)
        sd[p + "self_attn.k_proj.weight"] = unpermute(tensors[b + "attn_k.weight"], n_kv)
        sd[p + "self_attn.v_proj.weight"] = tensors[b + "attn_v.weight"]
        sd[p + "self_attn.o_proj.weight"] = tensors[b + "attn_output.weight"]
        sd[p + "post_attention_layernorm.weight"] = tensors[b + "ffn_norm.weight"]
        sd[p + "mlp.gate_proj.weight"] = tensors[b + "ffn_gate.weight"]
        sd[p + "mlp.up_proj.weight"] = tensors[b + "ffn_up.weight"]
        sd[p + "mlp.down_proj.weight"] = tensors[b + "ffn_down.weight"]
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()}, strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    assert not missing and not unexpected, (missing, unexpected)
    if config.tie_word_embeddings:
        model.tie_weights()

    # Token ids of the prompts as the SmolLM2 (GPT-2 style BPE) tokenizer
    # gives them, from the GGUF's own vocabulary.
    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(model_path),
                                                     gguf_file=os.path.basename(model_path))
    texts = ["The capital of France is",
             "<|im_start|>user\nWrite a haiku about bread.<|im_end|>\n<|im_start|>assistant\n",
             "def fibonacci(n):\n    "]
    prompts, all_logits = [], []
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float().numpy()
            # Greedy decoding with the KV cache; record the top-2 margin of
            # every step so near-ties (which 8-bit activations could flip)
            # are visible.
            out = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=0)
        generated = out.sequences[0, len(ids):].tolist()
        margins = []
        for s in out.scores:
            top2 = torch.topk(s[0].float(), 2).values
            margins.append(float(top2[0] - top2[1]))
        prompts.append({"text": text, "ids": ids, "greedy": generated,
                        "min_top2_margin": min(margins)})
        all_logits.append(logits.astype("<f4"))
        print(f"smollm2: {text!r}: {len(ids)} ids, min margin {min(margins):.4f}, "
              f"greedy {tok.decode(generated)!r}", file=sys.stderr)
    np.concatenate(all_logits).tofile(os.path.join(GOLDEN, "smollm2_logits.f32"))
    meta = {"model": os.path.basename(model_path), "vocab_size": int(vocab),
            "logits_file": "smollm2_logits.f32", "logits_layout": "[n_prompts, vocab] f32 little-endian, last prompt row",
            "prompts": prompts, "produced_by": versions()}
    with open(os.path.join(GOLDEN, "smollm2.json"), "w") as f:
        json.dump(meta, f, indent=1)


def randomize(model, seed):
    """transformers initialises biases to 0 and norms to 1; give every
    parameter random values so each feature (biases, q/k norms) matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def tiny_models():
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                  max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=None)
    return [
        ("llama", transformers.LlamaConfig(
            **common, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 16})),
        ("mistral", transformers.MistralConfig(**common, tie_word_embeddings=False, sliding_window=7,
                                               rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
        ("qwen2", transformers.Qwen2Config(**common, tie_word_embeddings=False,
                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
        ("qwen3", transformers.Qwen3Config(**common, head_dim=24, tie_word_embeddings=True,
                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    ]


def tiny(name, config, seed):
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    randomize(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    out_dir = os.path.join(GOLDEN, f"tiny_{name}")
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    # Only what brioche reads: config.json and the weights.
    for f in os.listdir(out_dir):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(out_dir, f))
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, config.vocab_size, (23,), generator=g).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    golden = {"architecture": name, "ids": ids, "logits": [[float(x) for x in row] for row in logits],
              "produced_by": versions()}
    with open(os.path.join(GOLDEN, f"tiny_{name}.json"), "w") as f:
        json.dump(golden, f)
    print(f"tiny_{name}: logits std {logits.std():.3f}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--skip-gguf", action="store_true")
    args = ap.parse_args()
    os.makedirs(GOLDEN, exist_ok=True)
    torch.set_num_threads(2)
    for i, (name, config) in enumerate(tiny_models()):
        tiny(name, config, 100 + i)
    if not args.skip_gguf:
        smollm2(args.model)


if __name__ == "__main__":
    main()
