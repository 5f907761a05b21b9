#!/usr/bin/env python3
"""Gemma 4 text-model fixtures and goldens from Hugging Face transformers.

Builds small random-weight Gemma 4 models (transformers' own classes, f64
forward for the goldens, eager attention), each switching features of Gemma4TextConfig on,
saves each as a safetensors directory with a small byte-level BPE tokenizer
(made here with `tokenizers`, vocabulary = the model's), and records:

  goldens/<name>.json        prompts (token ids), greedy continuations made by
                             transformers' generate (its KV cache, sliding and
                             shared layers included), the top-2 margin of
                             every greedy step, the tool versions
  goldens/<name>.logits.f32  logits of every row of every prompt, in prompt
                             order: [sum of prompt lengths, vocab] f32 LE

Fixtures (tests/fixtures/gemma4/<name>/):
  mix  Gemma4ForCausalLM: sliding and full layers with their own head dims
       (per_layer_config), default RoPE on sliding layers and proportional
       partial RoPE (0.25) on full ones, attention_k_eq_v (full layers take
       V from k_proj, one kv head), GQA, untied lm_head, final logit
       soft-capping at 8 (the top logits bend), random layer_scalar.
  e2b  Gemma4ForCausalLM shaped like gemma-4-e2b: per-layer inputs
       (hidden_size_per_layer_input), KV-shared last layers
       (num_kv_shared_layers), the double-wide MLP of shared layers, tied
       embeddings, soft-capping 30; weights stored in bf16 (the golden is the
       f32 forward of the bf16-rounded weights), config in the hub's form
       (global_head_dim, no per_layer_config).
  moe  Gemma4ForConditionalGeneration (text weights under
       model.language_model.*, a tiny vision tower beside them): the MoE
       block (router, top-2 of 4 experts) next to the dense MLP.

Usage: python3 tools/oracle/gemma4_oracle.py   (CPU, a few seconds)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gemma4")
VOCAB = 320
PROMPT_LENGTHS = [5, 12, 37]  # 37 > every fixture's sliding_window
N_GREEDY = 12


def versions():
    import tokenizers
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "script": "tools/oracle/gemma4_oracle.py"}


TRAINING_TEXT = """The quick brown fox jumps over the lazy dog. Bread is baked in an oven from flour,
water, salt and yeast. A haiku has three lines of five, seven and five syllables. The capital of France
is Paris; the capital of Italy is Rome. Models read tokens and write tokens, one at a time.
def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)
Hello, world! How are you today? I am fine, thank you. What is your favorite condiment?
Gemma reads the prompt, then writes an answer; the server streams it back to the client as events.
Seven swans swim quietly past the old mill while children laugh and jump into the cold river."""

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def make_tokenizer(out_dir):
    """A byte-level BPE of exactly VOCAB ids: Gemma's special ids first
    (<pad> 0, <eos> 1, <bos> 2, <unk> 3), the turn markers, then printable
    ASCII, space and newline, and merges learned from a short text. No token
    holds a byte above 0x7f, so whatever a random model generates decodes to
    valid UTF-8 (end-to-end tests compare text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=[chr(c) for c in range(0x21, 0x7f)] + ["\u0120", "\u010a"])
    tok.train_from_iterator([TRAINING_TEXT], trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<end_of_turn>", "pad_token": "<pad>",
                   "unk_token": "<unk>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE}, f, indent=1)


def randomize(model, seed):
    """transformers initialises norms to 1, layer_scalar to 1 and the router
    scales to 1; random values everywhere make each of them matter. The
    token embedding is small (with a large one the residual stream is the
    input token's row and a tied model repeats its input) and the final norm
    brings the logits back to a few units."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "vision" in name or "rotary" in name or "embed_scale" in name or "inv_freq" in name:
                continue
            if not p.is_floating_point():
                continue
            if name.endswith("layer_scalar"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("language_model.norm.weight") or name == "model.norm.weight":
                p.copy_(4.0 * (1.0 + 0.3 * torch.randn(p.shape, generator=g)))
            elif "norm" in name or name.endswith("router.scale") or name.endswith("per_expert_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.12 * torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def fixtures():
    common = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=48, num_attention_heads=4,
                  max_position_embeddings=512, rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1,
                  bos_token_id=2, vocab_size_per_layer_input=VOCAB)
    mix = Gemma4TextConfig(
        **common, num_hidden_layers=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}},
        hidden_size_per_layer_input=0, final_logit_softcapping=8.0, tie_word_embeddings=False)
    e2b = Gemma4TextConfig(
        **common, num_hidden_layers=5, num_key_value_heads=1, head_dim=16, global_head_dim=32,
        sliding_window=6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                     "full_attention"],
        hidden_size_per_layer_input=8, num_kv_shared_layers=2, use_double_wide_mlp=True,
        final_logit_softcapping=30.0, tie_word_embeddings=True)
    moe_text = Gemma4TextConfig(
        **common, num_hidden_layers=3, num_key_value_heads=2, head_dim=16, global_head_dim=16,
        sliding_window=7, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4, top_k_experts=2,
        moe_intermediate_size=32, final_logit_softcapping=30.0, tie_word_embeddings=True)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=8, patch_size=4, pooling_kernel_size=2,
                  position_embedding_size=16)
    moe = Gemma4Config(text_config=moe_text.to_dict(), vision_config=vision, audio_config=None)
    return [("mix", mix, "f32", False), ("e2b", e2b, "bf16", True), ("moe", moe, "bf16", False)]


def hub_form(config_path):
    """Rewrites a saved text config the way the hub's Gemma 4 configs spell
    the full layers' shape (global_head_dim, num_global_key_value_heads)
    instead of transformers 5.25's per_layer_config."""
    with open(config_path) as f:
        cfg = json.load(f)
    overrides = cfg.pop("per_layer_config")
    head_dims = {v["head_dim"] for v in overrides.values()}
    assert len(head_dims) == 1
    cfg["global_head_dim"] = head_dims.pop()
    kv = {v.get("num_key_value_heads") for v in overrides.values()}
    cfg["num_global_key_value_heads"] = kv.pop()
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=2)


N_TEXT_GREEDY = 8


def text_goldens(model, out_dir):
    """Greedy continuations of text prompts through the fixture's own
    tokenizer (no BOS: tokenizer_config.json says add_bos_token false), for
    the end-to-end tests of `brioche run` and `brioche serve`: the first two
    prompts (word prefixes of the training text) whose continuation holds no
    special token (the CLI would stop there) and whose top-2 margins all
    exceed 1e-3. The continuation is recorded as ids and as `tokenizers`'
    decoding."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    words = TRAINING_TEXT.split()
    found = []
    for start in range(0, len(words) - 4, 3):
        text = " ".join(words[start:start + 4])
        ids = tok.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=N_TEXT_GREEDY, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True, pad_token_id=0,
                                 eos_token_id=None)
        greedy = out.sequences[0, len(ids):].tolist()
        margins = [float(torch.topk(sc[0].float(), 2).values.diff().abs()) for sc in out.scores]
        if min(margins) < 1e-3 or any(t < 6 for t in greedy):
            continue
        found.append({"text": text, "ids": ids, "greedy": greedy,
                      "greedy_text": tok.decode(greedy, skip_special_tokens=True),
                      "min_top2_margin": min(margins)})
        if len(found) == 2:
            break
    assert found, "no text prompt with a clear greedy continuation"
    return found


def build(name, config, dtype, seed, hub):
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    text = config.get_text_config()
    text._attn_implementation = "eager"
    if text.enable_moe_block:
        config._experts_implementation = "eager"
        text._experts_implementation = "eager"
    cls = Gemma4ForConditionalGeneration if isinstance(config, Gemma4Config) else Gemma4ForCausalLM
    model = cls(config).float().eval()
    randomize(model, seed)
    if text.tie_word_embeddings:
        model.tie_weights()
    if dtype == "bf16":
        # The golden is the f32 forward of exactly the stored weights.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    out_dir = os.path.join(OUT, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    save = model
    if dtype == "bf16":
        save = cls(config).eval()
        save.load_state_dict(model.state_dict())
        save = save.to(torch.bfloat16)
        if text.tie_word_embeddings:
            save.tie_weights()
    save.save_pretrained(out_dir, safe_serialization=True)
    for f in os.listdir(out_dir):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(out_dir, f))
    if hub:
        hub_form(os.path.join(out_dir, "config.json"))
    make_tokenizer(out_dir)
    # Reload from disk: the goldens are what transformers computes for the
    # files as written (hub form included).
    # The goldens are transformers' forward in f64: the random models are
    # sensitive enough that its own f32 forward is 2.7e-4 off (the mix
    # fixture's long prompt), as far as any f32 implementation may be.
    reloaded = cls.from_pretrained(out_dir, dtype=torch.float64, attn_implementation="eager").eval()
    if text.enable_moe_block:
        reloaded.config.get_text_config()._experts_implementation = "eager"

    g = torch.Generator().manual_seed(seed + 1)
    prompts, logits_rows = [], []
    for n in PROMPT_LENGTHS:
        ids = [2] + torch.randint(6, VOCAB, (n - 1,), generator=g).tolist()
        with torch.no_grad():
            logits = reloaded(input_ids=torch.tensor([ids])).logits[0].numpy()
            out = reloaded.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False,
                                    output_scores=True, return_dict_in_generate=True, pad_token_id=0,
                                    eos_token_id=None)
        greedy = out.sequences[0, len(ids):].tolist()
        margins = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
        assert int(np.argmax(logits[-1])) == greedy[0], (name, n)
        prompts.append({"ids": ids, "greedy": greedy, "top2_margins": margins})
        logits_rows.append(logits.astype("<f4"))
        print(f"{name}: prompt of {n}: logits std {logits.std():.3f}, greedy {greedy}, "
              f"min margin {min(margins):.4f}", file=sys.stderr)
    text_prompts = text_goldens(reloaded, out_dir)
    os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
    np.concatenate(logits_rows).tofile(os.path.join(OUT, "goldens", f"{name}.logits.f32"))
    golden = {"fixture": name, "vocab_size": VOCAB, "stored_dtype": dtype, "prompts": prompts,
              "text_prompts": text_prompts,
              "logits_file": f"{name}.logits.f32",
              "logits_layout": "[sum of prompt lengths, vocab] f32 little-endian, every row, prompts in order",
              "produced_by": versions()}
    with open(os.path.join(OUT, "goldens", f"{name}.json"), "w") as f:
        json.dump(golden, f, indent=1)


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    for i, (name, config, dtype, hub) in enumerate(fixtures()):
        build(name, config, dtype, 400 + i, hub)


if __name__ == "__main__":
    main()
