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
4. brioche on a 4-bit directory (--bits 4, read with --weights-dtype f32)
   prints transformers' greedy text on the same codes dequantized to f32
   here (checks the MLX packing);
5. torch_peer.py's forward (f32 on the CPU) gives transformers' logits for
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
QUANTIZED = ["gemma4-tiny", "qwen3.5-moe-tiny"]
PROMPT = "The quick brown fox jumps over the lazy dog"
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


def compare_greedy(what, model, hf_dir, brioche_dir, brioche, extra=()):
    """`brioche run` on brioche_dir prints the text of transformers' 16 greedy tokens (model, loaded from hf_dir),
    up to a near-tie: where they part, transformers' top two logits must be within 1e-3 (bf16 weights, f32
    arithmetic either way). Returns what it found, in words."""
    tok = AutoTokenizer.from_pretrained(hf_dir)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False, min_new_tokens=16)
    new = out[0, ids.shape[1]:]
    want = tok.decode(new, skip_special_tokens=True)  # brioche prints no special token
    r = subprocess.run([brioche, "run", "-m", brioche_dir, "--device", "cpu", "-p", PROMPT, "--raw", "--temp", "0",
                        "-n", "16", "--ignore-eos", "-t", "2", *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{what}: brioche run failed: {r.stderr}"
    text = r.stdout.rstrip("\n")
    if text == want:
        return f"brioche's 16 greedy tokens = transformers' ({want!r})"
    k = max(j for j in range(len(new) + 1) if text.startswith(tok.decode(new[:j], skip_special_tokens=True)))
    with torch.no_grad():
        top = model(out).logits[0, ids.shape[1] - 1 + k].float().topk(2).values
    margin = (top[0] - top[1]).item()
    assert margin < 1e-3, (f"{what}: brioche printed {text!r}, transformers' greedy text is {want!r}; they part at "
                           f"generated token {k}, where transformers' margin is {margin:.2e}\n{r.stderr}")
    return f"brioche's greedy tokens = transformers' up to a near-tie at token {k} (margin {margin:.1e})"


def dequantize(src, dst):
    """An MLX-affine directory -> the same model in f32 under the same names (what its codes mean: element j of
    a row at bits [j*bits, (j+1)*bits) of the row's little-endian u32 words, w = q * scale + bias per group)."""
    import json
    import shutil

    import make_model
    st = torch_peer.Safetensors(src)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    q = config.pop("quantization")
    config.pop("quantization_config")
    entries = []
    for name in sorted(st.index):
        if name.endswith((".scales", ".biases")):
            continue
        m, base, v = st.index[name]
        prefix = name[: -len(".weight")] if name.endswith(".weight") else None
        if prefix and prefix + ".scales" in st.index:
            bits = q.get(prefix, q)["bits"]
            b, e = v["data_offsets"]
            words = torch.frombuffer(m, dtype=torch.int32, count=(e - b) // 4, offset=base + b).reshape(v["shape"])
            shifts = torch.arange(0, 32, bits, dtype=torch.int64)
            codes = ((words.to(torch.int64) & 0xFFFFFFFF)[..., None] >> shifts) & ((1 << bits) - 1)
            codes = codes.reshape(v["shape"][0], -1).float()
            scales = st.get(prefix + ".scales", "cpu", torch.float32)
            biases = st.get(prefix + ".biases", "cpu", torch.float32)
            group = codes.shape[1] // scales.shape[1]
            w = (codes.view(codes.shape[0], -1, group) * scales[..., None] + biases[..., None]).reshape(codes.shape)
        else:
            w = st.get(name, "cpu", torch.float32)
        entries.append((name, "F32", list(w.shape), lambda gen, device, row0, rows, w=w: w[row0:row0 + rows]))
    os.makedirs(dst, exist_ok=True)
    make_model.write_safetensors(os.path.join(dst, "model.safetensors"), entries, "cpu", 0)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def quantized_check(shape, brioche, work):
    """brioche on make_model's 4-bit directory, its weights dequantized at load (--weights-dtype f32, so the
    arithmetic is f32 as in transformers, not int8 activations), prints transformers' greedy text on the codes
    dequantized here: the packing, scales and biases mean what make_model meant."""
    d = os.path.join(work, shape + "-q4")
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), "--shape", shape, "--bits", "4", "--out", d],
                   check=True)
    dequantize(d, d + "-dequantized")
    model = AutoModelForCausalLM.from_pretrained(d + "-dequantized", dtype=torch.float32).eval()
    found = compare_greedy(shape + " 4-bit", model, d + "-dequantized", d, brioche, ("--weights-dtype", "f32"))
    print(f"{shape} 4-bit, dequantized by brioche at load: {found} (transformers on the codes dequantized here)",
          flush=True)


def check(shape, brioche, work):
    d = os.path.join(work, shape)
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), "--shape", shape, "--out", d], check=True)
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    missing, unexpected = info["missing_keys"], info["unexpected_keys"]
    assert not missing and not unexpected, f"{shape}: missing {missing}, unexpected {unexpected}"
    model.eval()
    greedy = compare_greedy(shape, model, d, d, brioche)

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
    for s in QUANTIZED:
        quantized_check(s, a.brioche, a.work)


if __name__ == "__main__":
    main()
