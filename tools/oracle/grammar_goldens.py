"""Golden token-mask walks from xgrammar for brioche's grammar tests.

For each case (JSON schema, EBNF, regex) and vocabulary (Llama-3, Qwen3) it
runs seeded random walks: at every step it records xgrammar's allowed-token
set (count + a 64-bit hash of the bitmask words; the full id list when the
set or its complement is small), then picks an allowed token (biased to
short tokens and EOS so walks finish) and accepts it.

Hash of a mask: sum_i words[i] * splitmix64(i) mod 2^64 over the uint32
words of the ceil(V/32) bitmask (bit set = allowed).

Usage: python3 tools/oracle/grammar_goldens.py [--walks N]
Writes tests/grammar/golden/walks_<vocab>.json.zst.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np
import xgrammar as xgr
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(__file__))
from grammar_cases import EBNF, REGEX, SCHEMAS  # noqa: E402
from grammar_vocab import EOS, load_vocab  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_WHITESPACE = 20  # brioche's SchemaOptions default
MAX_STEPS = 48
FULL_LIMIT = 64


def splitmix(n):
    x = (np.arange(n, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mask_hash(words_u32, mult):
    with np.errstate(over="ignore"):
        return int(np.sum(words_u32.astype(np.uint64) * mult, dtype=np.uint64))


# brioche's "time" (and the time part of "date-time") stops seconds at 59;
# xgrammar's allows the leap second 60, which validators such as Python's
# jsonschema reject. A documented difference: xgrammar gets those formats as
# the equivalent pattern of brioche's language, so the masks still compare.
# (Written for xgrammar 0.2.9's JSON-pattern converter: the optional
# fraction as "(...|)"; there "(...+)?" lets a digit follow the seconds,
# which its compile_regex does not.)
#
# Likewise brioche's "date" (and the date part of "date-time") admits only
# real calendar dates, as jsonschema checks them (date.fromisoformat): years
# 0001-9999, month lengths, Feb 29 in leap years only; xgrammar's admits day
# 01-31 of any month and year 0000.
MULTIPLE_OF_4 = r"(0[48]|[2468][048]|[13579][26])"
DATE = (r"((000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-"
        r"((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
        r"|([0-9]{2}" + MULTIPLE_OF_4 + "|" + MULTIPLE_OF_4 + "00)-02-29)")
TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]+|)(Z|[-+]([01][0-9]|2[0-3]):[0-5][0-9])"
FORMAT_PATTERNS = {"date": "^" + DATE + "$", "time": "^" + TIME + "$", "date-time": "^" + DATE + "T" + TIME + "$"}


CALENDAR_DATES = {"type": "array", "minItems": 4, "maxItems": 4,
                  "items": {"anyOf": [{"type": "string", "format": "date"},
                                      {"type": "string", "format": "date-time"}]}}


def for_xgrammar(schema):
    if isinstance(schema, list):
        return [for_xgrammar(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: for_xgrammar(v) for k, v in schema.items()}
    if out.get("format") in FORMAT_PATTERNS:
        out["pattern"] = FORMAT_PATTERNS[out.pop("format")]
    return out


def compile_case(compiler, kind, source, options):
    if kind == "json_schema":
        ws = options.get("max_whitespace", MAX_WHITESPACE)
        return compiler.compile_json_schema(json.dumps(for_xgrammar(source)),
                                            any_whitespace=options.get("any_whitespace", True),
                                            max_whitespace_cnt=ws if ws > 0 else None)
    if kind == "ebnf":
        return compiler.compile_grammar(source)
    if kind == "regex":
        return compiler.compile_regex(source)
    if kind == "builtin_json":
        return compiler.compile_builtin_json_grammar()
    raise ValueError(kind)


def walk(compiled, tok_len, eos, seed, vocab_size, mult):
    rng = random.Random(seed)
    m = xgr.GrammarMatcher(compiled)
    bm = xgr.allocate_token_bitmask(1, vocab_size)
    tokens, steps, full = [], [], {}
    for step in range(MAX_STEPS + 1):
        m.fill_next_token_bitmask(bm)
        words = bm[0].numpy().view(np.uint32).copy()
        if vocab_size % 32:  # xgrammar may set the padding bits past the vocabulary
            words[-1] &= np.uint32((1 << (vocab_size % 32)) - 1)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)
        ids = np.nonzero(allowed)[0]
        steps.append([int(len(ids)), format(mask_hash(words, mult), "016x")])
        if len(ids) <= FULL_LIMIT:
            full[str(step)] = ["+"] + ids.tolist()
        elif vocab_size - len(ids) <= FULL_LIMIT:
            full[str(step)] = ["-"] + np.nonzero(~allowed)[0].tolist()
        if len(ids) == 0 or step == MAX_STEPS:
            break
        eos_ok = [e for e in eos if allowed[e]]
        r = rng.random()
        if eos_ok and r < 0.4:
            choice = eos_ok[0]
        else:
            short = ids[tok_len[ids] == 1]
            pool = short if len(short) and rng.random() < 0.6 else ids
            choice = int(pool[rng.randrange(len(pool))])
        assert m.accept_token(choice), (choice, step)
        tokens.append(choice)
        if m.is_terminated():  # stop token accepted: nothing is allowed any more
            steps.append([0, format(0, "016x")])
            break
    return {"seed": seed, "tokens": tokens, "steps": steps, "full": full, "terminated": bool(m.is_terminated())}


def cases():
    out = []
    for name, schema in SCHEMAS:
        out.append((name, "json_schema", schema, {}))
    for name, schema in SCHEMAS[:4]:
        out.append((name + "/compact", "json_schema", schema, {"any_whitespace": False}))
    for name, schema in SCHEMAS[:2]:
        out.append((name + "/unbounded_ws", "json_schema", schema, {"max_whitespace": 0}))
    for name, ebnf in EBNF:
        out.append((name, "builtin_json" if ebnf is None else "ebnf", ebnf, {}))
    for name, rx in REGEX:
        out.append((name, "regex", rx, {}))
    # Appended last so the seeds of the cases above stay the same: dates
    # where months and leap years matter.
    out.append(("calendar_dates", "json_schema", CALENDAR_DATES, {"any_whitespace": False}))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walks", type=int, default=5)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    for vocab_name in ["llama3", "qwen3"]:
        toks, special = load_vocab(os.path.join(ROOT, f"tests/fixtures/tokenizers/{vocab_name}/tokenizer.json.zst"))
        eos = EOS[vocab_name]
        info = xgr.TokenizerInfo(toks, xgr.VocabType.RAW, stop_token_ids=eos)
        compiler = xgr.GrammarCompiler(info, max_threads=2)
        tok_len = np.array([len(t) for t in toks])
        mult = splitmix((len(toks) + 31) // 32)
        walks = []
        for ci, (name, kind, source, options) in enumerate(cases()):
            if args.only and args.only not in name:
                continue
            compiled = compile_case(compiler, kind, source, options)
            for w in range(args.walks):
                seed = 1000 * ci + w
                rec = walk(compiled, tok_len, eos, seed, len(toks), mult)
                rec.update({"case": name, "kind": kind, "source": source, "options": options})
                walks.append(rec)
            print(vocab_name, name, "steps", sum(len(w["steps"]) for w in walks[-args.walks:]), file=sys.stderr)
        golden = {
            "tool": f"xgrammar {version('xgrammar')}",
            "generator": "tools/oracle/grammar_goldens.py",
            "vocab": vocab_name,
            "vocab_size": len(toks),
            "eos": eos,
            "special": special,
            "max_whitespace": MAX_WHITESPACE,
            "hash": "sum_i words[i]*splitmix64(i) mod 2^64",
            "walks": walks,
        }
        path = os.path.join(ROOT, f"tests/grammar/golden/walks_{vocab_name}.json.zst")
        data = json.dumps(golden, separators=(",", ":")).encode()
        subprocess.run(["zstd", "-19", "-q", "-f", "-o", path], input=data, check=True)
        print(path, len(data), os.path.getsize(path), "bytes", len(walks), "walks", file=sys.stderr)


if __name__ == "__main__":
    main()
