#!/usr/bin/env python3
"""Golden log-probabilities for `brioche eval preference` / `perplexity`
(tests/train/golden/sequence_scores_smollm2.json): every pair's chosen and rejected
reply-token log-prob sums, and every perplexity row's, on the default model.

The oracle is independent of brioche's C++: the GGUF's weights dequantized by the `gguf`
package (Q4_1/Q8_0 blocks to f32), a plain numpy Llama forward in float64 (RMSNorm,
RoPE on adjacent pairs as llama.cpp applies it to the GGUF's permuted Q/K rows, grouped-
query causal attention, SwiGLU, tied head), and tokens from Hugging Face `tokenizers` +
transformers' chat-template renderer (tools/oracle/data_goldens.py). (transformers with
torch would be the usual oracle; torch is not installable on the development machine,
and the device machine cannot hold the 98 MB model, so the forward is numpy's.)

brioche computes in f32 on quantized weights (activations quantized for the integer dot
products on the CPU), so the test compares with a tolerance, not exactly.

Usage: python3 tools/oracle/eval_goldens.py [--gguf PATH]
"""
import argparse
import importlib.util
import json
import os

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "train", "golden", "sequence_scores_smollm2.json")

PAIRS = [
    {"prompt": "What is the capital of France?", "chosen": "The capital of France is Paris.",
     "rejected": "France does not have a capital."},
    {"prompt": "Name a primary color.", "chosen": "Red.", "rejected": "Red is a color that is often considered primary, among others."},
    {"prompt": [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Opposite of hot?"}],
     "chosen": "Cold.", "rejected": "Warm."},
    {"prompt": "Write 2+2 as a word.", "chosen": "Four", "rejected": "Five"},
    {"prompt": "Translate 'merci' to English.", "chosen": "Thank you.", "rejected": "Goodbye."},
]
ROWS = [
    {"text": "The quick brown fox jumps over the lazy dog. It was a sunny day in the park."},
    {"messages": [{"role": "user", "content": "Say hello in Spanish."}, {"role": "assistant", "content": "Hola."}]},
    {"prompt": "Count from one to five.", "completion": "One, two, three, four, five."},
    {"text": "In 1969, Apollo 11 landed on the Moon; Neil Armstrong was the first to walk on it."},
]


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tools", "oracle", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Llama:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        f = lambda k: r.fields[k].contents()
        self.n_layer = int(f("llama.block_count"))
        self.n_head = int(f("llama.attention.head_count"))
        self.n_kv = int(f("llama.attention.head_count_kv"))
        self.theta = float(f("llama.rope.freq_base"))
        self.eps = float(f("llama.attention.layer_norm_rms_epsilon"))
        self.w = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape))
            self.w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x [T, heads, d]; adjacent pairs (2i, 2i+1) rotate by pos·θ^(−2i/d)
        d = x.shape[-1]
        inv = self.theta ** (-np.arange(0, d, 2) / d)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    def logprobs(self, ids):
        """log p(ids[k] | ids[<k]) for k = 1..T−1."""
        T = len(ids)
        x = self.w["token_embd.weight"][ids]
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.norm(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.n_head, -1)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, self.n_kv, -1)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, self.n_kv, -1)
            q, k = self.rope(q, pos), self.rope(k, pos)
            d = q.shape[-1]
            rep = self.n_head // self.n_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            att = np.einsum("thd,shd->hts", q, k) / np.sqrt(d) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", att, v).reshape(T, -1)
            x = x + o @ self.w[p + "attn_output.weight"].T
            h = self.norm(x, self.w[p + "ffn_norm.weight"])
            g = h @ self.w[p + "ffn_gate.weight"].T
            u = h @ self.w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ self.w[p + "ffn_down.weight"].T
        z = self.norm(x, self.w["output_norm.weight"]) @ self.out.T
        m = z.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
        return np.array([z[k - 1, ids[k]] - lse[k - 1] for k in range(1, T)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    dg = load_module("data_goldens")
    tok, template, special, add_bos = dg.smollm2(args.gguf)
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    def render(msgs, gen):
        out, _ = render_jinja_template(conversations=[_normalize_chat_messages(msgs)], chat_template=template,
                                       add_generation_prompt=gen, **special)
        return out[0]

    bos = tok.token_to_id(special["bos_token"])
    def prompt_ids(text):
        ids = tok.encode(text, add_special_tokens=False).ids
        return ([bos] if add_bos and (not ids or ids[0] != bos) else []) + ids

    def split(prompt_msgs, reply):
        p = render(prompt_msgs, True)
        full = render(prompt_msgs + [{"role": "assistant", "content": reply}], False)
        return prompt_ids(p), tok.encode(full[len(p):], add_special_tokens=False).ids

    model = Llama(args.gguf)
    pairs = []
    for row in PAIRS:
        msgs = [{"role": "user", "content": row["prompt"]}] if isinstance(row["prompt"], str) else row["prompt"]
        scores = {}
        for key in ("chosen", "rejected"):
            p, r = split(msgs, row[key])
            lp = model.logprobs(p + r)
            scores[key] = {"sum": float(lp[len(p) - 1:].sum()), "tokens": len(r)}
        pairs.append(scores)
    rows = []
    for row in ROWS:
        if "text" in row:
            ids = prompt_ids(row["text"])
            lp = model.logprobs(ids)
            rows.append({"response": {"sum": float(lp.sum()), "tokens": len(ids) - 1}})
            continue
        msgs = row["messages"][:-1] if "messages" in row else [{"role": "user", "content": row["prompt"]}]
        reply = row["messages"][-1]["content"] if "messages" in row else row["completion"]
        p, r = split(msgs, reply)
        lp = model.logprobs(p + r)
        rows.append({"response": {"sum": float(lp[len(p) - 1:].sum()), "tokens": len(r)},
                     "full": {"sum": float(lp.sum()), "tokens": len(p) + len(r) - 1}})
    import tokenizers, transformers
    golden = {"generator": {"tool": "tools/oracle/eval_goldens.py", "numpy": np.__version__,
                            "gguf": getattr(gguf, "__version__", "unknown"), "tokenizers": tokenizers.__version__,
                            "transformers": transformers.__version__},
              "model": os.path.basename(args.gguf), "pairs_data": PAIRS, "pairs": pairs, "rows_data": ROWS, "rows": rows}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(json.dumps({"pairs": pairs, "rows": rows}, indent=None))


if __name__ == "__main__":
    main()
