#!/usr/bin/env python3
"""`brioche export` to a Hugging Face folder, checked with transformers and peft.

On the default model (SmolLM2-135M-Instruct Q4_1 GGUF): a random PEFT LoRA
adapter (rank 8, all seven projections, B drawn N(0, 0.05²)) is made with
peft on transformers' own reading of the GGUF (which de-quantizes it and
undoes llama.cpp's Q/K row order), then

  brioche export --adapter A -o M32 --type f32     merged, f32
  brioche export --adapter A -o M16 --type bf16    merged, bf16 (the default)
  brioche export --adapter A -o U --unmerged       the base + U/adapter

and:
  - transformers loads M32; its logits on a chat prompt equal those of
    peft's merge_and_unload on the GGUF base: max |Δ| ≤ 2e-3 (f32 both);
  - M16's logits equal those of that merged model rounded to bf16 by torch
    (max |Δ| ≤ 2e-2: the same rounding of the same f32 weights, up to their
    last-bit differences), and stay within 1.0 of the f32 ones (bf16 weights;
    measured 0.63 on a -30..40 logit range) with the same greedy token at
    ≥ 90% of positions;
  - M32's tokenizer (tokenizer.json rebuilt from the GGUF) gives the ids
    transformers' GGUF tokenizer gives, on text and on the chat template;
  - AutoPeftModelForCausalLM.from_pretrained(U/adapter) (its base named by
    the adapter) gives the merged logits: max |Δ| ≤ 2e-3;
  - brioche reads M32 as transformers does: `brioche eval perplexity -m M32`
    gives transformers' log-prob sum of a text within 1e-4 relative. (Not
    against the GGUF base with --adapter: brioche's Q4_1 path computes with
    8-bit activations, 0.5% of a token's log-prob here.)

Prints "SKIP export_hf_e2e: ..." and exits 77 without torch, transformers,
peft, gguf or the default model.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODEL = os.path.expanduser(os.environ.get("BRIOCHE_DEFAULT_MODEL",
                                          "~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


def skip(why):
    print(f"SKIP export_hf_e2e: {why}")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", required=True)
    args = ap.parse_args()
    try:
        import torch
        import transformers
        import peft
        import gguf  # noqa: F401  (transformers reads GGUF through it)
    except ImportError as e:
        skip(f"missing python package ({e.name})")
    if not os.path.exists(MODEL):
        skip(f"default model not found at {MODEL}")
    torch.set_num_threads(2)
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()

    work = tempfile.mkdtemp(prefix="brioche_export_hf_")
    gguf_dir, gguf_name = os.path.dirname(MODEL), os.path.basename(MODEL)
    base = transformers.AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    gguf_tok = transformers.AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    cfg = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                              "up_proj", "down_proj"], task_type="CAUSAL_LM")
    torch.manual_seed(3)  # A's init and B's draw
    model = peft.get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    adapter = os.path.join(work, "adapter")
    model.save_pretrained(adapter)
    merged_ref = model.merge_and_unload().eval()

    def export(out, *extra):
        r = subprocess.run([args.brioche, "export", "-m", MODEL, "--adapter", adapter, "-o", out, "-t", "2", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"export {extra}: exit {r.returncode}\n{r.stderr}"
        print(r.stdout.strip())

    m32, m16, unmerged = (os.path.join(work, n) for n in ("merged_f32", "merged_bf16", "unmerged"))
    export(m32, "--type", "f32")
    export(m16)
    export(unmerged, "--unmerged", "--type", "f32")

    messages = [{"role": "user", "content": "Write a haiku about bread, then count from 1 to 12: 1, 2, 3..."}]
    ours_tok = transformers.AutoTokenizer.from_pretrained(m32)
    texts = ["Hello world!", "  leading spaces and digits 12345 67,890.1", "Ünïcödé — émojis 🍞🥐 and 中文字符",
             "code:\n\tdef f(x):\n\t\treturn x**2  # tabs\n", "<|im_start|>user\nhi<|im_end|>\n"]
    for t in texts:
        a, b = ours_tok(t)["input_ids"], gguf_tok(t)["input_ids"]
        assert a == b, f"tokenizer differs on {t!r}: {a} vs {b}"
    prompt = ours_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == gguf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([gguf_tok(prompt)["input_ids"]])
    assert ours_tok(prompt)["input_ids"] == ids[0].tolist()
    print(f"tokenizer: {len(texts)} texts and the chat prompt ({ids.shape[1]} tokens) tokenize alike")

    with torch.no_grad():
        want = merged_ref(input_ids=ids).logits[0].float()
        for p in merged_ref.parameters():  # the merged weights rounded to bf16, computed in f32
            p.copy_(p.to(torch.bfloat16).float())
        want16 = merged_ref(input_ids=ids).logits[0]
        got32 = transformers.AutoModelForCausalLM.from_pretrained(m32, dtype=torch.float32)(input_ids=ids).logits[0]
        got16 = transformers.AutoModelForCausalLM.from_pretrained(m16, dtype=torch.float32)(input_ids=ids).logits[0]
        unm = peft.AutoPeftModelForCausalLM.from_pretrained(os.path.join(unmerged, "adapter"), dtype=torch.float32)
        got_unm = unm(input_ids=ids).logits[0]
    d32 = (got32 - want).abs().max().item()
    d16 = (got16 - want).abs().max().item()
    d16_rounded = (got16 - want16).abs().max().item()
    dunm = (got_unm - want).abs().max().item()
    agree16 = (got16.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(f"logits vs peft merge_and_unload on the GGUF base: f32 export max|d| {d32:.2e}, bf16 export "
          f"max|d| {d16:.3f} (greedy token equal at {agree16:.0%} of {ids.shape[1]} positions; vs the reference "
          f"rounded to bf16 {d16_rounded:.2e}), "
          f"unmerged base + AutoPeftModel max|d| {dunm:.2e} (logit range {want.min():.1f}..{want.max():.1f})")
    assert d32 <= 2e-3, d32
    assert d16_rounded <= 2e-2, d16_rounded
    assert d16 <= 1.0 and agree16 >= 0.9, (d16, agree16)
    assert dunm <= 2e-3, dunm

    # brioche reads the folder as transformers does: `brioche eval perplexity -m M32` on a text row scores
    # every token after the first; the same sum from transformers' logits on M32.
    rows = os.path.join(work, "rows.jsonl")
    text = "Bread is made from flour, water, salt and yeast. Knead it, let it rise, and bake it until golden."
    with open(rows, "w") as f:
        f.write(json.dumps({"text": text}) + "\n")
    scores = os.path.join(work, "scores.json")
    r = subprocess.run([args.brioche, "eval", "perplexity", "-m", m32, "-d", rows, "-o", scores, "-q", "-t", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ours_sum, ours_n = json.load(open(scores))["models"][0]["rows"][0]
    text_ids = torch.tensor([ours_tok(text)["input_ids"]])
    with torch.no_grad():
        m32_model = transformers.AutoModelForCausalLM.from_pretrained(m32, dtype=torch.float32)
        logp = torch.log_softmax(m32_model(input_ids=text_ids).logits[0].double(), -1)
    theirs = logp[:-1].gather(1, text_ids[0, 1:, None])[:, 0].sum().item()
    assert ours_n == text_ids.shape[1] - 1, (ours_n, text_ids.shape)
    print(f"brioche eval perplexity -m {os.path.basename(m32)}: log-prob sum {ours_sum:.4f} over {ours_n} tokens, "
          f"transformers {theirs:.4f}")
    assert abs(ours_sum - theirs) <= 1e-4 * abs(theirs) + 1e-3, (ours_sum, theirs)

    # Refusals: an existing output, a type a folder does not hold.
    r = subprocess.run([args.brioche, "export", "--adapter", adapter, "-o", m32], capture_output=True, text=True)
    assert r.returncode == 2 and "exists" in r.stderr, r.stderr
    r = subprocess.run([args.brioche, "export", "--adapter", adapter, "-o", os.path.join(work, "q"), "--type", "q4_k"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bf16, f16 or f32" in r.stderr, r.stderr
    subprocess.run(["rm", "-rf", work])
    print("export_hf_e2e: ok")


if __name__ == "__main__":
    main()
