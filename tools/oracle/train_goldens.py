#!/usr/bin/env python3
"""Golden losses and LoRA gradients for tests/train, from torch autograd.

A tiny random-weight Llama (transformers, saved as f32 safetensors) with a
PEFT LoRA adapter on q,k,v,o,gate,up,down (rank 4, alpha 8; B initialised
randomly so every factor gets a gradient) is run in float64 on a fixed batch.
For every objective the script records the loss and d loss / d lora_A, lora_B:

  sft_full / sft_response : token-mean cross-entropy (HF/TRL SFT)
  orpo_full / orpo_response : ORPO exactly as TRL's ORPOTrainer computes it:
      policy_nll_loss (CE over the chosen sequences; scope full = every
      position after the first, response = response tokens only)
      - beta * mean(logsigmoid(log_odds)), log_odds from length-averaged
      response log-probs with log1p(-exp(.)), beta = orpo_lambda
  dpo   : TRL sigmoid DPO, summed log-probs, reference = adapter disabled
  ipo   : TRL IPO, length-averaged log-probs, reference = adapter disabled
  simpo : TRL CPO loss_type=simpo: -logsigmoid(beta*(lw - lr) - gamma)

It also saves the adapter with peft's save_pretrained (the layout our writer
must reproduce) and the logits of one sequence with the adapter applied.

  python3 tools/oracle/train_goldens.py                 # regenerate goldens
  python3 tools/oracle/train_goldens.py --check-adapter DIR [--base DIR]
      load a brioche-written adapter DIR with peft onto the base (default: the
      tiny golden model) and print its logits for the golden probe sequence
      next to ours (DIR/probe_logits.json written by the C++ test), max |diff|.
  python3 tools/oracle/train_goldens.py --check-adapter DIR --base MODEL.gguf \
      --brioche build/cpu/brioche --prompt "Repeat: the quiet river" [--prompt ...]
      the same for a GGUF base (transformers de-quantizes it and undoes
      llama.cpp's Q/K row permutation, so this also checks our permutation of
      lora_B): greedy answers of peft on transformers vs `brioche run
      --adapter DIR --temp 0`. Measured on the ORPO positive control's adapter
      (SmolLM2-135M-Instruct Q4_1): 4 of 5 prompts identical, the fifth parts
      at a near-tie (top-2 logit gap 0.16).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
import peft
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "train", "golden")
MODEL_DIR = os.path.join(GOLDEN, "tiny_llama")
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8.0
ORPO_LAMBDA, BETA, SIMPO_BETA, SIMPO_GAMMA = 0.25, 0.1, 2.0, 0.5

# Token batches (vocab 64). SFT: (prompt, response); preference: (prompt, chosen, rejected).
SFT = [([1, 5, 9, 13], [21, 34, 2]), ([1, 7], [40, 41, 42, 43, 2])]
PREF = [([1, 5, 9, 13, 3], [21, 34, 2], [22, 35, 36, 2]), ([1, 7, 8], [40, 41, 2], [50, 2])]
PROBE = [1, 5, 9, 13, 3, 21, 34, 2]


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "script": "tools/oracle/train_goldens.py", "dtype": "float64"}


def build_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=128,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # larger-than-default weights so logits are not flat
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model = model.float().eval()
    if os.path.exists(MODEL_DIR):
        shutil.rmtree(MODEL_DIR)
    model.save_pretrained(MODEL_DIR, safe_serialization=True)
    return model


def add_lora(model):
    cfg = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0, bias="none",
                          task_type="CAUSAL_LM")
    pm = peft.get_peft_model(model, cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
    return pm


def token_logps(model, prompt, response, scope_full):
    """Per-token log-probs of one unpadded sequence: (prompt_logps, response_logps)."""
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0].double()
    logp = F.log_softmax(logits, dim=-1)
    targets = ids[0, 1:]
    lp = logp[:-1].gather(1, targets[:, None])[:, 0]
    p = len(prompt)
    return lp[: p - 1], lp[p - 1:]


def lora_grads(pm):
    out = {}
    for name, p in pm.named_parameters():
        if "lora_" in name:
            # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
            parts = name.split(".")
            layer = parts[parts.index("layers") + 1]
            module = parts[parts.index("lora_A" if "lora_A" in name else "lora_B") - 1]
            ab = "lora_A" if "lora_A" in name else "lora_B"
            out[f"layers.{layer}.{module}.{ab}"] = p.grad.detach().double().clone()
    return out


def objective(pm, kind):
    if kind.startswith("sft"):
        full = kind == "sft_full"
        total, count = 0.0, 0
        for prompt, resp in SFT:
            lp_p, lp_r = token_logps(pm, prompt, resp, full)
            total = total + lp_r.sum() + (lp_p.sum() if full else 0.0)
            count += len(lp_r) + (len(lp_p) if full else 0)
        return -total / count
    pol = [(token_logps(pm, p, c, True), token_logps(pm, p, r, True)) for p, c, r in PREF]
    if kind.startswith("orpo"):
        full = kind == "orpo_full"
        nll_sum, nll_n = 0.0, 0
        for (cp, cr), _ in pol:
            nll_sum = nll_sum + cr.sum() + (cp.sum() if full else 0.0)
            nll_n += len(cr) + (len(cp) if full else 0)
        policy_nll_loss = -nll_sum / nll_n
        chosen = torch.stack([cr.mean() for (_, cr), _ in pol])
        rejected = torch.stack([rr.mean() for _, (_, rr) in pol])
        # TRL ORPOTrainer.odds_ratio_loss
        log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected)))
        ratio = F.logsigmoid(log_odds)
        losses = ORPO_LAMBDA * ratio
        return policy_nll_loss - losses.mean()
    if kind == "simpo":
        chosen = torch.stack([cr.mean() for (_, cr), _ in pol])
        rejected = torch.stack([rr.mean() for _, (_, rr) in pol])
        logits = chosen - rejected
        gamma_logratios = SIMPO_GAMMA / SIMPO_BETA
        return (-F.logsigmoid(SIMPO_BETA * (logits - gamma_logratios))).mean()
    with torch.no_grad(), pm.disable_adapter():
        ref = [(token_logps(pm, p, c, True), token_logps(pm, p, r, True)) for p, c, r in PREF]
    agg = (lambda t: t.mean()) if kind == "ipo" else (lambda t: t.sum())
    pc = torch.stack([agg(cr) for (_, cr), _ in pol])
    pr = torch.stack([agg(rr) for _, (_, rr) in pol])
    rc = torch.stack([agg(cr) for (_, cr), _ in ref])
    rr = torch.stack([agg(r2) for _, (_, r2) in ref])
    logits = (pc - pr) - (rc - rr)
    if kind == "ipo":
        return ((logits - 1 / (2 * BETA)) ** 2).mean()
    return (-F.logsigmoid(BETA * logits)).mean()


def generate():
    model = build_model()
    pm = add_lora(model)
    factors = {}
    for name, p in pm.named_parameters():
        if "lora_" in name:
            parts = name.split(".")
            layer = parts[parts.index("layers") + 1]
            ab = "lora_A" if "lora_A" in name else "lora_B"
            module = parts[parts.index(ab) - 1]
            factors[f"layers.{layer}.{module}.{ab}"] = p.detach().float().clone().contiguous()
    adapter_dir = os.path.join(GOLDEN, "peft_adapter")
    if os.path.exists(adapter_dir):
        shutil.rmtree(adapter_dir)
    pm.save_pretrained(adapter_dir)
    readme = os.path.join(adapter_dir, "README.md")  # a model card template, not needed by the tests
    if os.path.exists(readme):
        os.remove(readme)
    pm = pm.double()
    results = {"versions": versions(), "rank": RANK, "alpha": ALPHA, "orpo_lambda": ORPO_LAMBDA, "beta": BETA,
               "simpo_beta": SIMPO_BETA, "simpo_gamma": SIMPO_GAMMA, "sft": SFT, "preference": PREF,
               "probe": PROBE, "losses": {}}
    grads = {}
    for kind in ["sft_full", "sft_response", "orpo_full", "orpo_response", "dpo", "ipo", "simpo"]:
        pm.zero_grad()
        loss = objective(pm, kind)
        loss.backward()
        results["losses"][kind] = float(loss)
        for k, g in lora_grads(pm).items():
            grads[f"{kind}.{k}"] = g.float().contiguous()
    with torch.no_grad():
        logits = pm(input_ids=torch.tensor([PROBE])).logits[0].double()
    results["probe_logits"] = [[float(x) for x in row] for row in logits]
    save_file(factors, os.path.join(GOLDEN, "lora_factors.safetensors"))
    save_file(grads, os.path.join(GOLDEN, "lora_grads.safetensors"))
    with open(os.path.join(GOLDEN, "train_goldens.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("losses:", json.dumps(results["losses"], indent=1))


def check_adapter_gguf(adapter_dir, gguf_path, brioche, prompts, max_tokens=10):
    import subprocess
    d, f = os.path.dirname(os.path.abspath(gguf_path)), os.path.basename(gguf_path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    base = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    pm = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
    mismatches = near_ties = 0
    for p in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt")
        if not torch.is_tensor(ids):
            ids = ids["input_ids"]
        with torch.no_grad():
            out = pm.generate(ids, max_new_tokens=max_tokens, do_sample=False, output_scores=True,
                              return_dict_in_generate=True)
        theirs = tok.decode(out.sequences[0][ids.shape[1]:], skip_special_tokens=True).strip()
        # Smallest top-1 vs top-2 logit gap on peft's greedy path: below ~0.5 the
        # answers may part at a near-tie (our Q4_1 matmul rounds activations to
        # 8 bits; transformers runs the de-quantized weights in f32).
        gap = min(float(torch.topk(z[0], 2).values.diff().abs()) for z in out.scores)
        ours = None
        if brioche:
            ours = subprocess.run([brioche, "run", "-m", gguf_path, "-p", p, "--temp", "0", "-n", str(max_tokens),
                                   "--adapter", adapter_dir], capture_output=True, text=True,
                                  check=True).stdout.strip()
            if ours != theirs:
                near_ties += gap < 0.5
                mismatches += gap >= 0.5
        print(f"{p!r}: peft {theirs!r}" + (f", brioche {ours!r}" if ours is not None else "") +
              f" (min top-2 logit gap {gap:.3f})")
    if brioche:
        print(f"{len(prompts) - mismatches - near_ties}/{len(prompts)} greedy answers identical, "
              f"{near_ties} parted at a near-tie, {mismatches} differ")
        sys.exit(1 if mismatches else 0)


def check_adapter(adapter_dir, base_dir):
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    pm = peft.PeftModel.from_pretrained(base, adapter_dir).double().eval()
    with torch.no_grad():
        logits = pm(input_ids=torch.tensor([PROBE])).logits[0].double().numpy()
    ours_path = os.path.join(adapter_dir, "probe_logits.json")
    print("peft logits[-1][:8]:", np.round(logits[-1][:8], 5))
    if os.path.exists(ours_path):
        ours = np.array(json.load(open(ours_path)))
        print("max |peft - brioche| =", float(np.abs(ours - logits).max()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-adapter")
    ap.add_argument("--base", default=MODEL_DIR)
    ap.add_argument("--brioche", help="brioche binary to compare greedy answers with (GGUF base)")
    ap.add_argument("--prompt", action="append", default=[])
    args = ap.parse_args()
    if args.check_adapter and args.base.endswith(".gguf"):
        check_adapter_gguf(args.check_adapter, args.base, args.brioche, args.prompt or ["Repeat: the quiet river"])
    elif args.check_adapter:
        check_adapter(args.check_adapter, args.base)
    else:
        os.makedirs(GOLDEN, exist_ok=True)
        generate()


if __name__ == "__main__":
    main()
