#!/usr/bin/env python3
"""LoRA on Gemma 4: loss, LoRA gradients and adapted logits from torch autograd + peft.

For each fixture of tools/oracle/gemma4_oracle.py named below, loads the
model with transformers (f64, eager attention), wraps it with peft LoRA
(r=4, alpha=8, q/k/v/o/gate/up/down: peft adapts only the projections a
layer has, so no k/v in KV-shared layers and no v in attention_k_eq_v full
layers) with random, non-zero A and B (f32 values), and records for two
token sequences (longer than the sliding window):

  tests/fixtures/gemma4/lora/<name>/adapter_config.json,
                                    adapter_model.safetensors   the adapter (PEFT layout, f32)
  tests/fixtures/gemma4/lora/<name>/grads.safetensors    d loss / d every lora_A, lora_B (f32,
                                                          named as the adapter's tensors)
  tests/fixtures/gemma4/lora/<name>/case.json            the sequences, the loss (mean NLL of
                                                          every next token), tool versions
  tests/fixtures/gemma4/lora/<name>/logits.f32           the adapted model's logits of sequence 0,
                                                          [len, vocab] f32 LE (what merging the
                                                          adapter at load must reproduce)

The moe fixture (a Gemma4ForConditionalGeneration) gets its adapter by a
regex over the text model's projections, so its tensors are named
base_model.model.model.language_model.layers.N... as peft names them there.
Its second case, lora/moe_experts, adds peft's target_parameters
["experts.gate_up_proj", "experts.down_proj"] (LoRA per expert on the MoE
block's 3-D parameters: layers.N.experts.base_layer.lora_A [E·r, hidden],
lora_B [2I, r·E] for gate_up_proj; layers.N.experts.lora_A/B for down_proj).

It also makes one more fixture, tests/fixtures/gemma4/bias: the mix model's
config with attention_bias (q/k/v/o biases), random f32 weights (the
fixture's norms and scalars random as tools/oracle/gemma4_oracle.py makes
them), mix's tokenizer; its lora/bias/base_logits.f32 are the model's own
logits of sequence 0 (adapter disabled).

Usage: python3 tools/oracle/gemma4_lora_oracle.py   (CPU, seconds)
"""
import os
import shutil
import sys

import torch
from lora_case import save_lora_case
from peft import LoraConfig, get_peft_model
from transformers import Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gemma4")
OUT = os.path.join(FIXTURES, "lora")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LENGTHS = [11, 23]  # 23 > the fixtures' sliding windows


def make_bias_fixture(seed):
    """mix's config with attention_bias: true, saved as tests/fixtures/gemma4/bias."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemma4_oracle import randomize  # noqa: E402
    config = Gemma4TextConfig.from_pretrained(os.path.join(FIXTURES, "mix"))
    config.attention_bias = True
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(config).float().eval()
    randomize(model, seed)
    out = os.path.join(FIXTURES, "bias")
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in os.listdir(out):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(out, f))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURES, "mix", f), os.path.join(out, f))


def build(name, seed, fixture=None, target_parameters=None):
    fixture = fixture or name
    torch.manual_seed(seed)
    multimodal = fixture == "moe"  # a Gemma4ForConditionalGeneration: peft's names carry model.language_model
    if multimodal:
        model = Gemma4ForConditionalGeneration.from_pretrained(os.path.join(FIXTURES, fixture), dtype=torch.float64,
                                                               attn_implementation="eager")
        model.config.get_text_config()._experts_implementation = "eager"
        targets = r".*language_model\.layers\.\d+\.(self_attn|mlp)\.(" + "|".join(TARGETS) + ")"
    else:
        model = Gemma4ForCausalLM.from_pretrained(os.path.join(FIXTURES, name), dtype=torch.float64,
                                                  attn_implementation="eager")
        targets = TARGETS
    model.eval()
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM", target_parameters=target_parameters)
    model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    for pname, p in model.named_parameters():
        if "lora_" in pname:
            with torch.no_grad():
                values = (torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.2).float()
                p.copy_(values.double())  # f32 values: brioche reads the adapter in f32
    vocab = model.config.get_text_config().vocab_size
    seqs = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in LENGTHS]

    total, count = torch.zeros((), dtype=torch.float64), 0
    logits0 = None
    for s in seqs:
        ids = torch.tensor([s])
        logits = model(input_ids=ids).logits[0]  # soft-capped by the model
        if logits0 is None:
            logits0 = logits.detach().float().numpy()
        logp = torch.log_softmax(logits, dim=-1)
        total = total - logp[:-1].gather(1, ids[0, 1:, None]).sum()
        count += len(s) - 1
    loss = total / count
    loss.backward()

    grads = save_lora_case(model, os.path.join(OUT, name), seqs, loss, count, vocab,
                           logits0, "tools/oracle/gemma4_lora_oracle.py")
    print(f"{name}: loss {float(loss):.6f}, {len(grads)} LoRA tensors, "
          f"max |grad| {max(float(g.abs().max()) for g in grads.values()):.3g}")


def main():
    build("mix", 11)
    build("e2b", 12)
    make_bias_fixture(13)
    build("bias", 14)
    build("moe", 15)
    # LoRA on the experts' 3-D parameters too (peft's ParamWrapper: A [E·r, in], B [out, r·E] per parameter;
    # with both targeted, gate_up_proj's wrapper is experts.base_layer, down_proj's experts).
    build("moe_experts", 16, fixture="moe", target_parameters=["experts.gate_up_proj", "experts.down_proj"])


if __name__ == "__main__":
    main()
