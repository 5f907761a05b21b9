#!/usr/bin/env python3
"""Local checks of the family benchmark's pieces on the tiny shapes (CPU,
transformers installed):

1. make_model.py's directory loads in transformers with no missing and no
   unexpected tensor (the layout is transformers' own);
2. `brioche run --raw --temp 0 --ignore-eos` prints the text of
   transformers' greedy tokens (16 of them, eos off) for a text prompt;
3. at every real shape (all layers), make_model.py's tensor names and shapes
   are those of transformers' model built from the same config.json (on the
   meta device: nothing allocated);
4. torch_peer.py's forward (f32 on the CPU) gives transformers' logits for
   a 70-token prompt (past Gemma's window of 8 and Qwen's delta-rule chunk
   of 64) and for 6 decode steps after it.

  python3 bench/families/check_local.py --brioche build/cpu/brioche [--work /tmp/h22-families]
"""
import argparse
import math
import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_peer  # noqa: E402

SHAPES = ["gemma4-tiny", "gemma4-tiny-keqv", "qwen3.5-tiny", "qwen3.5-moe-tiny"]
REAL = ["gemma4-e4b", "gemma4-31b", "qwen3.5-9b", "qwen3.5-35b-a3b"]


def layout_check(shape, work):
    """make_model's tensor list against transformers' parameters and persistent buffers for the config."""
    import json

    from transformers import AutoConfig

    import make_model
    config = make_model.load_config(shape)
    d = os.path.join(work, "layout-" + shape)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d))
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        want.pop("lm_head.weight", None)
    # Qwen 3.5 MoE: the module holds experts stacked, save_pretrained writes them one by one
    # (mlp.experts.E.{gate,up,down}_proj.weight, as tests/fixtures/qwen35/moe has them).
    for k in [k for k in want if k.endswith("mlp.experts.gate_up_proj") and "qwen3_5" in config["model_type"]]:
        E, two_i, h = want.pop(k)
        _, _, i = want.pop(k.replace("gate_up_proj", "down_proj"))
        base = k[: -len("gate_up_proj")]
        for e in range(E):
            want.update({f"{base}{e}.gate_proj.weight": [two_i // 2, h], f"{base}{e}.up_proj.weight": [two_i // 2, h],
                         f"{base}{e}.down_proj.weight": [h, i]})
    got = {name: shape for name, shape, _ in make_model.tensor_list(config)}
    assert got == want, (f"{shape}: missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}, "
                         f"shapes differ {[(k, got[k], want[k]) for k in got if k in want and got[k] != want[k]][:5]}")
    n = sum(math.prod(v) for v in got.values())
    print(f"{shape}: {len(got)} tensors, {n / 1e9:.2f}B values: names and shapes = transformers' ({type(model).__name__})",
          flush=True)
PROMPT = "The quick brown fox jumps over the lazy dog"


def check(shape, brioche, work):
    d = os.path.join(work, shape)
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), "--shape", shape, "--out", d], check=True)
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    missing, unexpected = info["missing_keys"], info["unexpected_keys"]
    assert not missing and not unexpected, f"{shape}: missing {missing}, unexpected {unexpected}"
    model.eval()
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False, min_new_tokens=16)
    new = out[0, ids.shape[1]:]
    want = tok.decode(new, skip_special_tokens=True)  # brioche prints no special token
    r = subprocess.run([brioche, "run", "-m", d, "--device", "cpu", "-p", PROMPT, "--raw", "--temp", "0", "-n", "16",
                        "--ignore-eos", "-t", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{shape}: brioche run failed: {r.stderr}"
    text = r.stdout.rstrip("\n")
    if text == want:
        greedy = f"brioche's 16 greedy tokens = transformers' ({want!r})"
    else:
        # Equal up to a near-tie: the first token whose text brioche does not continue with must be one
        # where transformers' top two logits are within 1e-3 (bf16 weights, f32 arithmetic either way).
        k = max(j for j in range(len(new) + 1) if text.startswith(tok.decode(new[:j], skip_special_tokens=True)))
        with torch.no_grad():
            top = model(out).logits[0, ids.shape[1] - 1 + k].float().topk(2).values
        margin = (top[0] - top[1]).item()
        assert margin < 1e-3, (f"{shape}: brioche printed {text!r}, transformers' greedy text is {want!r}; they part "
                               f"at generated token {k}, where transformers' margin is {margin:.2e}\n{r.stderr}")
        greedy = f"brioche's greedy tokens = transformers' up to a near-tie at token {k} (margin {margin:.1e})"

    # The peer against transformers: a 70-token prompt, then 6 steps of transformers' greedy tokens.
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, 70), generator=g)
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=6, do_sample=False, min_new_tokens=6)
        ref = model(gen).logits[0].float()  # every position's logits
        peer = torch_peer.load_model(d, torch.device("cpu"), torch.float32)
        paths = [False, True] if getattr(peer, "moe", False) else [False]  # MoE: the loop and the grouped GEMM
        for grouped in paths:
            peer.grouped_mm = grouped
            peer.new_caches(1, gen.shape[1] + 4)
            rows = [peer.prefill(prompt)[0]]
            pos = torch.tensor([prompt.shape[1]])
            for j in range(prompt.shape[1], gen.shape[1]):
                rows.append(peer.decode(gen[:, j:j + 1], pos)[0])
                pos += 1
            if grouped:
                assert (torch.stack(rows) - got).abs().max() < 1e-5, f"{shape}: grouped GEMM experts != loop"
            got = torch.stack(rows)
    ref = ref[prompt.shape[1] - 1: gen.shape[1]]
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= 1e-3 * max(scale, 1.0), f"{shape}: peer logits {err:.2e} from transformers' (max |logit| {scale:.2f})"
    print(f"{shape}: transformers loads it (no missing/unexpected tensor); {greedy}; peer logits within {err:.1e} of transformers' (max |logit| {scale:.2f}, 70-token prompt + "
          f"6 steps)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", required=True)
    ap.add_argument("--work", default="/tmp/h22-families")
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    a = ap.parse_args()
    for s in REAL:
        layout_check(s, a.work)
    for s in a.shapes:
        check(s, a.brioche, a.work)


if __name__ == "__main__":
    main()
