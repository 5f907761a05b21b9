#!/usr/bin/env python3
"""LoRA on Qwen 3.5: loss, LoRA gradients and adapted logits from torch autograd + peft.

Loads the fixtures of tools/oracle/qwen35_oracle.py (tests/fixtures/qwen35/{dense,moe},
layers [linear, full, linear, full]) with transformers in f64, wraps each with peft
LoRA (r=4, alpha=8) on every projection peft finds under these names:

  full attention : q_proj (query and gate rows), k_proj, v_proj, o_proj
  Gated DeltaNet : in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
  MLP            : gate_proj, up_proj, down_proj  (dense only in lora/moe, whose MoE block
                   stays frozen)

and a third case, lora/moe_experts, on the moe fixture with everything peft can
adapt in the MoE block as well: gate_proj/up_proj/down_proj (the shared expert's),
shared_expert_gate, and target_parameters ["experts.gate_up_proj",
"experts.down_proj"] (peft's ParamWrapper: per expert rank-r factors, A [E·r, in],
B [out, r·E]; gate_up_proj's wrapper is mlp.experts.base_layer, down_proj's
mlp.experts),

with random, non-zero A and B (f32 values), and records for two token sequences,
both longer than a delta-rule chunk (64 in transformers, 16 in brioche's forward)
and than brioche's backward checkpoint interval (32):

  tests/fixtures/qwen35/lora/<name>/adapter_config.json,
                                   adapter_model.safetensors  the adapter (PEFT layout, f32)
  tests/fixtures/qwen35/lora/<name>/grads.safetensors   d loss / d every lora_A, lora_B (f32,
                                                        named as the adapter's tensors)
  tests/fixtures/qwen35/lora/<name>/case.json           the sequences, the loss (mean NLL of
                                                        every next token), tool versions
  tests/fixtures/qwen35/lora/<name>/logits.f32          the adapted model's logits of sequence 0,
                                                        [len, vocab] f32 LE (what merging the
                                                        adapter at load must reproduce)
  tests/fixtures/qwen35/lora/<name>/base_logits.f32     the same without the adapter

transformers' delta-rule functions cast q/k/v/g/beta to f32 whatever the model's
dtype; so that autograd runs in f64 end to end, this script swaps
torch_chunk_gated_delta_rule for an f64 transcription of transformers' own
torch_recurrent_gated_delta_rule (the same rule, row by row) and checks that the
swap moves the logits by less than 1e-4 (f32 rounding of the chunked form) against transformers' unpatched forward.

Usage: python3 tools/oracle/qwen35_lora_oracle.py   (CPU, seconds)
"""
import os

import torch
from lora_case import save_lora_case
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import Qwen3_5ForCausalLM
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, modeling_qwen3_5_moe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "qwen35")
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
TARGETS = ATTENTION[:4] + ["gate_proj", "up_proj", "down_proj"] + ATTENTION[4:]
MODULES = (modeling_qwen3_5, modeling_qwen3_5_moe)
ORIGINAL = [m.torch_chunk_gated_delta_rule for m in MODULES]
LENGTHS = [75, 37]  # 75 > 64 (transformers' chunk) > 2·32 (brioche's backward checkpoints)


def recurrent_f64(query, key, value, g, beta, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' torch_recurrent_gated_delta_rule without its cast to f32."""
    assert initial_state is None
    n_k, n_v = key.shape[2], value.shape[2]
    if n_k != n_v:
        query = query.repeat_interleave(n_v // n_k, dim=2)
        key = key.repeat_interleave(n_v // n_k, dim=2)
    query, key, value, beta, g = [x.transpose(1, 2).contiguous() for x in (query, key, value, beta, g)]
    if use_qk_l2norm_in_kernel:
        query = query * torch.rsqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key * torch.rsqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    query = query / query.shape[-1] ** 0.5
    b, h, t, dk = key.shape
    state = torch.zeros(b, h, dk, value.shape[-1], dtype=value.dtype)
    outs = []
    for i in range(t):
        state = state * g[:, :, i].exp()[..., None, None]
        kv_mem = (state * key[:, :, i, :, None]).sum(-2)
        delta = (value[:, :, i] - kv_mem) * beta[:, :, i, None]
        state = state + key[:, :, i, :, None] * delta[:, :, None, :]
        outs.append((state * query[:, :, i, :, None]).sum(-2))
    out = torch.stack(outs, dim=2).transpose(1, 2).contiguous()
    return out, (state if output_final_state else None)


def build(name, model_cls, targets, seed, fixture=None, target_parameters=None):
    for m, f in zip(MODULES, ORIGINAL):
        m.torch_chunk_gated_delta_rule = f
    torch.manual_seed(seed)
    model = model_cls.from_pretrained(os.path.join(FIXTURES, fixture or name), dtype=torch.float64,
                                      attn_implementation="eager").eval()
    model.config._experts_implementation = "eager"
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM", target_parameters=target_parameters)
    model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    for pname, p in model.named_parameters():
        if "lora_" in pname:
            with torch.no_grad():
                values = (torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.2).float()
                p.copy_(values.double())  # f32 values: brioche reads the adapter in f32
    vocab = model.config.vocab_size
    seqs = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in LENGTHS]

    with torch.no_grad():
        unpatched = model(input_ids=torch.tensor([seqs[0]])).logits[0]
    for m in MODULES:
        m.torch_chunk_gated_delta_rule = recurrent_f64
    with torch.no_grad():
        patched = model(input_ids=torch.tensor([seqs[0]])).logits[0]
    swap = float((patched - unpatched).abs().max())
    assert 0 < swap < 1e-4, f"the f64 recurrence moved the logits by {swap}"

    total, count = torch.zeros((), dtype=torch.float64), 0
    logits0 = None
    for s in seqs:
        ids = torch.tensor([s])
        logits = model(input_ids=ids).logits[0]
        if logits0 is None:
            logits0 = logits.detach().float().numpy()
        logp = torch.log_softmax(logits, dim=-1)
        total = total - logp[:-1].gather(1, ids[0, 1:, None]).sum()
        count += len(s) - 1
    loss = total / count
    loss.backward()

    grads = save_lora_case(model, os.path.join(FIXTURES, "lora", name), seqs, loss, count, vocab,
                           logits0, "tools/oracle/qwen35_lora_oracle.py",
                           {"f64_recurrence_logit_shift": swap})
    modules = sorted({k.split(".")[-3] for k in grads})
    print(f"{name}: loss {float(loss):.8f}, {len(grads)} LoRA tensors on {modules}, "
          f"max |grad| {max(float(g.abs().max()) for g in grads.values()):.3g}, f64 swap moved logits {swap:.2e}")


def main():
    torch.set_num_threads(2)
    build("dense", Qwen3_5ForCausalLM, TARGETS, 47)
    build("moe", Qwen3_5MoeForCausalLM, ATTENTION, 48)
    build("moe_experts", Qwen3_5MoeForCausalLM, TARGETS + ["shared_expert_gate"], 49, fixture="moe",
          target_parameters=["experts.gate_up_proj", "experts.down_proj"])
    check_expert_nesting()


def check_expert_nesting():
    """peft nests the two ParamWrappers in the order the module registers its parameters (gate_up_proj
    first), whatever the order of target_parameters: brioche reads and writes the names so."""
    for order in (["experts.gate_up_proj", "experts.down_proj"], ["experts.down_proj", "experts.gate_up_proj"]):
        model = Qwen3_5MoeForCausalLM.from_pretrained(os.path.join(FIXTURES, "moe"), dtype=torch.float64)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_parameters=order, task_type="CAUSAL_LM"))
        state = get_peft_model_state_dict(model)
        cfg = model.config
        inner = state["base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight"]
        outer = state["base_model.model.model.layers.0.mlp.experts.lora_B.weight"]
        assert inner.shape == (2 * cfg.moe_intermediate_size, 4 * cfg.num_experts), (order, inner.shape)
        assert outer.shape == (cfg.hidden_size, 4 * cfg.num_experts), (order, outer.shape)


if __name__ == "__main__":
    main()
