#!/usr/bin/env python3
"""Qwen 3.5 fixtures and goldens from Hugging Face transformers (torch, f32).

Random-weight text models built by transformers from SMALL configs and saved
with save_pretrained (f32 safetensors), each a directory under
tests/fixtures/qwen35/<name>/ with the logits transformers computes for them:

  dense : Qwen3_5ForCausalLM, 4 layers [linear, full, linear, full] (Gated
          DeltaNet with 2 key heads / 4 value heads; gated attention with
          4 heads / 2 kv heads, head_dim 16, partial rotary 0.25), SwiGLU MLP,
          tied embeddings.
  moe   : Qwen3_5MoeForCausalLM, same mixer layout, 4 experts top-2 with a
          gated shared expert.

Weights are re-drawn after transformers' init (std 0.02 would make every
logit ~0 and greedy ties likely), including the norms (zero-centred RMSNorm:
weight 0 is identity), A_log, dt_bias, the conv and the gated norm.

Goldens per model (golden.json + *.f32, little-endian f32 row-major):
  short  : 13 prompt ids, logits of every row             -> short_logits.f32
  long   : 200 prompt ids (more than three 64-token delta-rule chunks),
           logits of rows 0, 8, 16, ..., and the last     -> long_logits.f32
  greedy : prompt of 50 ids, 40 greedy ids from generate() (the decode
           crosses the 64-token chunk boundary), their text, and the logits
           of each decode step                           -> greedy_logits.f32
  text   : two text prompts through the fixture's tokenizer, 16 greedy ids
           and their text (for `brioche run` / `serve` end to end)
The tokenizer (byte-level BPE trained here with `tokenizers` on a small
English text, 512 ids incl. <|endoftext|>, <|im_start|>, <|im_end|>
and reserved specials up to 512) and a
ChatML chat template make the directory usable by `brioche run`/`serve`.

Usage: python3 tools/oracle/qwen35_oracle.py
"""
import json
import os
import shutil

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "qwen35")
VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CORPUS = """The quick brown fox jumps over the lazy dog. A small model reads a small text and learns
its pairs of bytes. Hello world, hello there, how are you today? I am fine, thank you, and you?
Linear attention keeps a state of fixed size per head; full attention keeps every key and value.
The delta rule writes the difference between the value and what the state already predicts.
Once upon a time there was a brioche that wanted to run language models on a single machine.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Code: def f(x): return x * 2 + 1  # comment
""" * 4


def versions(script_args):
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "script": "tools/oracle/qwen35_oracle.py", **script_args}


def make_tokenizer(out_dir):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer=trainer)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    # The small corpus runs out of merges before VOCAB ids: the rest become
    # reserved special tokens (as real Qwen vocabularies pad theirs), so that
    # every id the model can sample has a token.
    n_reserved = VOCAB - tok.get_vocab_size()
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(n_reserved)])
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "bos_token": None, "add_bos_token": False,
                   "chat_template": CHAT_TEMPLATE}, f, indent=1)
    return tok


def common_config():
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                max_position_embeddings=4096, tie_word_embeddings=True,
                layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_num_key_heads=2, linear_num_value_heads=4,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                eos_token_id=2, pad_token_id=0, bos_token_id=None)


def redraw(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 4.0, generator=g).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith("linear_attn.norm.weight"):  # RMSNormGated: plain weight
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name:  # zero-centred RMSNorm: (1 + w)
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "conv1d" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def write_f32(path, rows):
    np.asarray(rows, dtype="<f4").tofile(path)


TEXT_PROMPTS = ["The quick brown fox", "Hello world, how are you today?"]


def text_goldens(model, tok):
    """Greedy continuations of text prompts through the fixture's own
    tokenizer (no special tokens added), decoded as brioche's streaming
    detokenizer does (special tokens skipped)."""
    out = []
    for text in TEXT_PROMPTS:
        ids = tok.encode(text).ids
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        greedy = [int(x) for x in gen[0, len(ids):]]
        out.append({"text": text, "ids": ids, "greedy": greedy,
                    "greedy_text": tok.decode(greedy, skip_special_tokens=True)})
    return out


def goldens(model, out_dir, seed):
    rng = np.random.default_rng(seed)
    short = [int(x) for x in rng.integers(3, VOCAB, 13)]
    long = [int(x) for x in rng.integers(3, VOCAB, 200)]
    prompt = [int(x) for x in rng.integers(3, VOCAB, 50)]
    with torch.no_grad():
        short_logits = model(torch.tensor([short])).logits[0].float().numpy()
        long_all = model(torch.tensor([long])).logits[0].float().numpy()
        long_rows = sorted(set(range(0, len(long), 8)) | {len(long) - 1})
        gen = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, min_new_tokens=40,
                             output_logits=True, return_dict_in_generate=True, eos_token_id=None,
                             pad_token_id=0)
    greedy = [int(x) for x in gen.sequences[0, len(prompt):]]
    greedy_logits = torch.stack([l[0] for l in gen.logits]).float().numpy()
    # The smallest gap between the top two logits along the greedy path:
    # the float error a greedy-equality test may have before it flips a token.
    top2 = np.sort(greedy_logits, axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    write_f32(os.path.join(out_dir, "short_logits.f32"), short_logits)
    write_f32(os.path.join(out_dir, "long_logits.f32"), long_all[long_rows])
    write_f32(os.path.join(out_dir, "greedy_logits.f32"), greedy_logits)
    return {"short_ids": short, "long_ids": long, "long_rows": long_rows, "prompt_ids": prompt,
            "greedy_ids": greedy, "greedy_min_top2_margin": margin,
            "logit_std": float(long_all.std()), "chunk_size": 64}


def build(name, model_cls, config, seed):
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    redraw(model, seed)
    out_dir = os.path.join(OUT, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out_dir, extra)):
            os.remove(os.path.join(out_dir, extra))
    tok = make_tokenizer(out_dir)
    g = goldens(model, out_dir, seed)
    g["greedy_text"] = tok.decode(g["greedy_ids"], skip_special_tokens=True)
    g["text_prompts"] = text_goldens(model, tok)
    g["versions"] = versions({"model": name, "seed": seed})
    with safetensors.safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        g["tensors"] = sorted(f.keys())
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(g, f)
    size = sum(os.path.getsize(os.path.join(out_dir, x)) for x in os.listdir(out_dir))
    print(f"{name}: {size / 1024:.0f} KiB, logit std {g['logit_std']:.2f}, "
          f"greedy min top-2 margin {g['greedy_min_top2_margin']:.4f}, greedy {g['greedy_ids'][:10]}...")


def main():
    torch.set_num_threads(2)
    build("dense", Qwen3_5ForCausalLM, Qwen3_5TextConfig(**common_config()), seed=35)
    moe = dict(common_config(), moe_intermediate_size=16, shared_expert_intermediate_size=24,
               num_experts=4, num_experts_per_tok=2)
    moe.pop("intermediate_size")
    build("moe", Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(**moe), seed=36)


if __name__ == "__main__":
    main()
