#!/usr/bin/env python3
"""Goldens for `brioche data` (tests/data/golden/*.json), from a second, independent
implementation of the rules docs/data.md states, and token lengths from Hugging Face
`tokenizers` + transformers' chat-template renderer.

  curate_*.json   curation of tests/data/fixtures/ultrafeedback*.jsonl under several option
                  sets: per-reason drop counts, the dropped lines, the train/valid rows.
  convert_*.json  conversion of the TRL / HH-RLHF / ShareGPT / Alpaca fixtures.
  token_lengths.json  for every readable fixture row: prompt tokens and each reply's tokens as
                  `brioche train` splits them (prompt = template render with the generation
                  prompt, BOS prepended when the tokenizer adds one; reply = what the full render
                  adds), through SmolLM2-135M-Instruct's tokenizer (built from its GGUF as
                  tools/oracle/tokenizer_goldens.py does) and GGUF chat template rendered by
                  transformers' render_jinja_template (what apply_chat_template runs).

The seeded choices (best-vs-random, the train/valid split) use xoshiro256** seeded by
splitmix64, re-implemented here from Blackman & Vigna's reference.

Usage: python3 tools/oracle/data_goldens.py [--gguf PATH]   (from the repository root)
"""
import argparse
import importlib.util
import json
import math
import os

import gguf
import tokenizers
import transformers
from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "fixtures")
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
M64 = (1 << 64) - 1


# ---- seeded random numbers -------------------------------------------------------------

def splitmix64_next(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Xoshiro:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x, z = splitmix64_next(x)
            self.s.append(z)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result


def row_seed(seed, number):
    z = (seed ^ ((number * 0x9E3779B97F4A7C15) & M64)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def split(rows, fraction, seed):
    n = len(rows)
    n_valid = int(math.floor(fraction * n + 0.5)) if fraction > 0 else 0
    n_valid = min(n_valid, max(n - 1, 0))
    order = list(range(n))
    rng = Xoshiro(seed)
    for i in range(n, 1, -1):
        j = rng.next() % i
        order[i - 1], order[j] = order[j], order[i - 1]
    valid = set(order[:n_valid])
    return [r for i, r in enumerate(rows) if i not in valid], [r for i, r in enumerate(rows) if i in valid]


# ---- reading -----------------------------------------------------------------------------

def read_rows(path):
    """(number, value or None) for every non-blank row; None = invalid JSON."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return [(i + 1, v) for i, v in enumerate(json.loads(text))]
    out = []
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            out.append((i + 1, json.loads(line)))
        except json.JSONDecodeError:
            out.append((i + 1, None))
    return out


class Bad(Exception):
    pass


def layout_of(row):
    if "completions" in row: return "ultrafeedback"
    if "conversations" in row: return "sharegpt"
    if "chosen" in row or "rejected" in row:
        if "score_chosen" in row or "score_rejected" in row: return "ultrafeedback-binarized"
        if any(isinstance(row.get(k), list) for k in ("chosen", "rejected", "prompt")): return "trl-conversational"
        return "hh-rlhf" if "prompt" not in row else "preference"
    if "messages" in row: return "chat"
    if "instruction" in row and "output" in row: return "alpaca"
    if "prompt" in row and "completion" in row: return "completion"
    if "text" in row: return "text"
    return None


KIND = {"preference": "pref", "trl-conversational": "pref", "hh-rlhf": "pref", "ultrafeedback": "rated",
        "ultrafeedback-binarized": "pref"}


def rating(v):
    if isinstance(v, bool): raise Bad("rating")
    if isinstance(v, (int, float)): return float(v)
    if v is None or v in ("", "N/A", "n/a", "NA"): return None
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise Bad("rating")


def prompt_msgs(p):
    if isinstance(p, str): return [{"role": "user", "content": p}]
    if not isinstance(p, list): raise Bad("prompt")
    for m in p:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or ("content" not in m and "tool_calls" not in m):
            raise Bad("message")
    return p


def reply_of(v):
    if isinstance(v, str): return [], {"role": "assistant", "content": v}
    msgs = prompt_msgs(v)
    if not msgs or msgs[-1]["role"] != "assistant": raise Bad("last not assistant")
    return msgs[:-1], msgs[-1]


def preference(row):
    if "chosen" not in row or "rejected" not in row: raise Bad("missing")
    bc, c = reply_of(row["chosen"])
    br, r = reply_of(row["rejected"])
    if bc != br: raise Bad("differ")
    prompt = prompt_msgs(row["prompt"]) if "prompt" in row else []
    prompt = bc if bc[:len(prompt)] == prompt and len(bc) >= len(prompt) else prompt + bc
    if not prompt: raise Bad("no prompt")
    return prompt, [c, r]


def hh(t):
    s = t.lstrip(" \t\r\n")
    if not s.startswith("Human:"): raise Bad("hh")
    pieces, pos = [], t.index("Human:")
    while pos is not None:
        marker = "Human:" if t.startswith("Human:", pos) else "Assistant:"
        start, nxt = pos + len(marker), pos + len(marker)
        while True:
            nxt = t.find("\n\n", nxt)
            if nxt < 0 or t.startswith("Human:", nxt + 2) or t.startswith("Assistant:", nxt + 2): break
            nxt += 1
        content = (t[start:] if nxt < 0 else t[start:nxt]).strip(" \t\r\n")
        pieces.append({"role": "user" if marker == "Human:" else "assistant", "content": content})
        pos = None if nxt < 0 else nxt + 2
    return pieces


def completion_text(c):
    for k in ("response", "text", "completion", "content", "output"):
        if k in c:
            if not isinstance(c[k], str): raise Bad("text")
            return c[k]
    raise Bad("no text")


def aspect(ann, name):
    if not isinstance(ann, dict) or name not in ann: return None
    a = ann[name]
    if isinstance(a, list):
        if not a: return None
        a = a[0]
    if isinstance(a, dict):
        return rating(a["Rating"]) if "Rating" in a else None
    return rating(a)


def fine(c):
    if "fine-grained_score" in c: return rating(c["fine-grained_score"])
    ann = c.get("annotations")
    if not isinstance(ann, dict): return None
    vals = [x for x in (aspect(ann, k) for k in ann) if x is not None]
    return sum(vals) / len(vals) if vals else None


def parse(row, layout, score="auto"):
    """(prompt messages, [(reply message, score)], text)"""
    if layout == "ultrafeedback":
        key = "instruction" if "instruction" in row else "prompt"
        if key not in row: raise Bad("no prompt")
        prompt = prompt_msgs(row[key])
        comps = row["completions"]
        if not isinstance(comps, list): raise Bad("completions")
        src = score
        if src == "auto":
            src = "overall" if comps and all(isinstance(c, dict) and "overall_score" in c for c in comps) else "fine-grained"
        replies = []
        for c in comps:
            if not isinstance(c, dict): raise Bad("completion")
            msg = {"role": "assistant", "content": completion_text(c)}
            if src == "overall": s = rating(c["overall_score"]) if "overall_score" in c else None
            elif src == "fine-grained": s = fine(c)
            else: s = aspect(c.get("annotations"), src)
            replies.append((msg, s))
        return prompt, replies, None
    if layout in ("preference", "trl-conversational", "ultrafeedback-binarized"):
        prompt, (c, r) = preference(row)
        if layout == "ultrafeedback-binarized":
            if "score_chosen" not in row or "score_rejected" not in row: raise Bad("scores")
            return prompt, [(c, rating(row["score_chosen"])), (r, rating(row["score_rejected"]))], None
        return prompt, [(c, None), (r, None)], None
    if layout == "hh-rlhf":
        if not isinstance(row.get("chosen"), str) or not isinstance(row.get("rejected"), str): raise Bad("hh")
        c, r = hh(row["chosen"]), hh(row["rejected"])
        if c[-1]["role"] != "assistant" or r[-1]["role"] != "assistant": raise Bad("ends")
        if c[:-1] != r[:-1]: raise Bad("differ")
        return c[:-1], [(c[-1], None), (r[-1], None)], None
    if layout == "sharegpt":
        roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
                 "bard": "assistant", "bing": "assistant", "model": "assistant", "system": "system", "tool": "tool",
                 "observation": "tool", "function_response": "tool"}
        conv = row["conversations"]
        if not isinstance(conv, list): raise Bad("conv")
        msgs = []
        for t in conv:
            who, text = ("role", "content") if isinstance(t, dict) and "role" in t and "content" in t else ("from", "value")
            if not isinstance(t, dict) or not isinstance(t.get(who), str) or not isinstance(t.get(text), str):
                raise Bad("turn")
            if t[who] not in roles: raise Bad("role")
            msgs.append({"role": roles[t[who]], "content": t[text]})
        if not msgs or msgs[-1]["role"] != "assistant": raise Bad("last")
        return msgs[:-1], [(msgs[-1], None)], None
    if layout == "chat":
        msgs = prompt_msgs(row["messages"])
        if not msgs or msgs[-1]["role"] != "assistant": raise Bad("last")
        return msgs[:-1], [(msgs[-1], None)], None
    if layout == "alpaca":
        if not isinstance(row.get("instruction"), str) or not isinstance(row.get("output"), str): raise Bad("alpaca")
        p = row["instruction"]
        if row.get("input") is not None:
            if not isinstance(row["input"], str): raise Bad("input")
            if row["input"].strip(): p += "\n\n" + row["input"]
        prompt = [{"role": "system", "content": row["system"]}] if isinstance(row.get("system"), str) and row["system"] else []
        return prompt + [{"role": "user", "content": p}], [({"role": "assistant", "content": row["output"]}, None)], None
    if layout == "completion":
        if not isinstance(row["completion"], str): raise Bad("completion")
        return prompt_msgs(row["prompt"]), [({"role": "assistant", "content": row["completion"]}, None)], None
    if layout == "text":
        if not isinstance(row["text"], str): raise Bad("text")
        return [], [], row["text"]
    raise Bad("layout")


def content(m):
    c = m.get("content", "")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c if isinstance(p, dict))


def prompt_field(prompt):
    if len(prompt) == 1 and set(prompt[0]) == {"role", "content"} and prompt[0]["role"] == "user" \
            and isinstance(prompt[0]["content"], str):
        return prompt[0]["content"]
    return prompt


def prompt_key(prompt):
    return json.dumps([{**m, "content": m["content"].strip(" \t\r\n")} if isinstance(m.get("content"), str) else m
                       for m in prompt], separators=(",", ":"), ensure_ascii=False)


def examples(path, score="auto"):
    """Yields (number, layout, parsed) for readable rows; drops go to the report."""
    report = {"rows": 0, "kept": 0, "dropped": {}, "dropped_at": {}}
    items, kind = [], None

    def drop(n, reason):
        report["rows"] += 1
        report["dropped"][reason] = report["dropped"].get(reason, 0) + 1
        report["dropped_at"].setdefault(reason, []).append(n)

    for n, row in read_rows(path):
        if row is None: drop(n, "invalid_json"); continue
        if not isinstance(row, dict): drop(n, "bad_row"); continue
        if isinstance(row.get("dpo"), dict): row = row["dpo"]
        layout = layout_of(row)
        if layout is None: drop(n, "bad_row"); continue
        k = KIND.get(layout, "sft")
        kind = kind or k
        if k != kind: drop(n, "other_kind"); continue
        try:
            items.append((n, layout, parse(row, layout, score)))
        except (Bad, KeyError):
            drop(n, "bad_row")
    return items, report, drop


# ---- curate and convert ------------------------------------------------------------------

def curate(path, selection="best-vs-worst", seed=0, min_gap=0.0, max_ratio=0.0, dedup=True, valid_fraction=0.0,
           score="auto", lengths=None, max_tokens=0):
    items, report, drop = examples(path, score)
    kept, seen = [], set()
    for n, layout, (prompt, replies, _) in items:
        if layout not in ("ultrafeedback", "ultrafeedback-binarized"): drop(n, "bad_row"); continue
        cands = [(m, s) for m, s in replies if s is not None and content(m).strip(" \t\r\n")]
        if len(cands) < 2: drop(n, "too_few_completions"); continue
        best = worst = cands[0]
        for c in cands:
            if c[1] > best[1]: best = c
            if c[1] < worst[1]: worst = c
        rej = worst
        if selection == "best-vs-random":
            lower = [c for c in cands if c[1] < best[1]]
            if lower: rej = lower[Xoshiro(row_seed(seed, n)).next() % len(lower)]
        gap = best[1] - rej[1]
        if gap <= 0: drop(n, "tie"); continue
        if gap < min_gap: drop(n, "gap_below_min"); continue
        if max_ratio > 0:
            a, b = len(content(best[0])), len(content(rej[0]))
            if max(a, b) / max(1, min(a, b)) > max_ratio: drop(n, "length_ratio"); continue
        if max_tokens:
            ln = lengths[n]
            tokens = ln["prompt"] + max(ln["replies"][replies.index(best)], ln["replies"][replies.index(rej)])
            if tokens > max_tokens: drop(n, "too_long"); continue
        if dedup:
            k = prompt_key(prompt)
            if k in seen: drop(n, "duplicate_prompt"); continue
            seen.add(k)
        kept.append({"prompt": prompt_field(prompt), "chosen": content(best[0]), "rejected": content(rej[0]),
                     "score_chosen": best[1], "score_rejected": rej[1]})
        report["rows"] += 1
        report["kept"] += 1
    train, valid = split(kept, valid_fraction, seed)
    return report, train, valid


def convert(path):
    items, report, drop = examples(path)
    kept = []
    for n, layout, (prompt, replies, text) in items:
        if KIND.get(layout) == "rated": drop(n, "bad_row"); continue
        if layout == "text":
            if not text.strip(" \t\r\n"): drop(n, "empty_reply"); continue
            kept.append({"text": text})
        else:
            if any(not content(m).strip(" \t\r\n") and "tool_calls" not in m for m, _ in replies):
                drop(n, "empty_reply"); continue
            if len(replies) == 2:
                kept.append({"prompt": prompt_field(prompt), "chosen": content(replies[0][0]),
                             "rejected": content(replies[1][0])})
            else:
                reply = replies[0][0]
                if set(reply) == {"role", "content"} and isinstance(reply["content"], str) and isinstance(prompt_field(prompt), str):
                    kept.append({"prompt": prompt_field(prompt), "completion": reply["content"]})
                else:
                    kept.append({"messages": prompt + [reply]})
        report["rows"] += 1
        report["kept"] += 1
    return report, kept


# ---- token lengths -----------------------------------------------------------------------

def smollm2(gguf_path):
    spec = importlib.util.spec_from_file_location("tokenizer_goldens", os.path.join(ROOT, "tools", "oracle", "tokenizer_goldens.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tok = mod.smollm2_from_gguf(gguf_path)
    reader = gguf.GGUFReader(gguf_path)
    fields = reader.fields
    template = bytes(fields["tokenizer.chat_template"].parts[-1]).decode()
    tokens = fields["tokenizer.ggml.tokens"]
    def token(key):
        i = int(fields[key].parts[-1][0])
        return bytes(tokens.parts[tokens.data[i]]).decode()
    add_bos = bool(fields["tokenizer.ggml.add_bos_token"].parts[-1][0]) if "tokenizer.ggml.add_bos_token" in fields else False
    return tok, template, {"bos_token": token("tokenizer.ggml.bos_token_id"), "eos_token": token("tokenizer.ggml.eos_token_id")}, add_bos


def lengths_of(path, tok, template, special, add_bos):
    bos_id = tok.token_to_id(special["bos_token"])
    def render(msgs, gen):
        out, _ = render_jinja_template(conversations=[_normalize_chat_messages(msgs)], chat_template=template,
                                       add_generation_prompt=gen, **special)
        return out[0]
    def prompt_tokens(text):
        ids = tok.encode(text, add_special_tokens=False).ids
        return len(ids) + (1 if add_bos and (not ids or ids[0] != bos_id) else 0)
    out = {}
    items, _, _ = examples(path)
    for n, layout, (prompt, replies, text) in items:
        if layout == "text":
            out[n] = {"text": prompt_tokens(text)}
            continue
        p = render(prompt, True)
        rl = []
        for m, _ in replies:
            full = render(prompt + [m], False)
            assert full.startswith(p)
            rl.append(len(tok.encode(full[len(p):], add_special_tokens=False).ids))
        out[n] = {"prompt": prompt_tokens(p), "replies": rl}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    os.makedirs(GOLDEN, exist_ok=True)
    meta = {"tool": "tools/oracle/data_goldens.py", "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__}
    def write(name, obj):
        with open(os.path.join(GOLDEN, name), "w") as f:
            json.dump({"generator": meta, **obj}, f, indent=1, ensure_ascii=False)
            f.write("\n")
    uf = os.path.join(FIXTURES, "ultrafeedback.jsonl")
    tok, template, special, add_bos = smollm2(args.gguf)
    lengths = {}
    for name in sorted(os.listdir(FIXTURES)):
        lengths[name] = lengths_of(os.path.join(FIXTURES, name), tok, template, special, add_bos)
    write("token_lengths.json", {"model": os.path.basename(args.gguf), "add_bos": add_bos,
                                 "files": {k: {str(n): v for n, v in d.items()} for k, d in lengths.items()}})
    cases = [
        ("curate_default", "ultrafeedback.jsonl", {}),
        ("curate_random", "ultrafeedback.jsonl", {"selection": "best-vs-random", "seed": 7, "min_gap": 1.0,
                                                  "max_ratio": 3.0, "valid_fraction": 0.34}),
        ("curate_fine_no_dedup", "ultrafeedback.jsonl", {"score": "fine-grained", "dedup": False,
                                                         "valid_fraction": 0.5, "seed": 3}),
        ("curate_binarized", "ultrafeedback_binarized.jsonl", {}),
        ("curate_max_tokens", "ultrafeedback.jsonl", {"max_tokens": 45}),
    ]
    for name, fixture, opts in cases:
        kw = dict(opts)
        if "max_tokens" in kw: kw["lengths"] = lengths[fixture]
        report, train, valid = curate(os.path.join(FIXTURES, fixture), **kw)
        write(name + ".json", {"input": fixture, "options": opts, "report": report, "train": train, "valid": valid})
    for fixture in ["trl_conversational.jsonl", "hh_rlhf.jsonl", "sharegpt.jsonl", "alpaca.json"]:
        report, rows = convert(os.path.join(FIXTURES, fixture))
        write("convert_" + fixture.split(".")[0] + ".json", {"input": fixture, "report": report, "rows": rows})
    print("wrote", sorted(os.listdir(GOLDEN)))


if __name__ == "__main__":
    main()
