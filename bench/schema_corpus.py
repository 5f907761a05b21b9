"""Real-world JSON schemas, side by side: brioche, xgrammar and llguidance in
one run, Llama-3 tokenizer, one thread (the table of issue 50).

For each engine and schema: compile (timed), then walk every instance's
tokens (Llama-3 ids from `tokenizers`, the same ids for all engines): at each
step fill the mask (timed) and check the token is allowed; at the end the
EOS bit decides. A valid instance (per `jsonschema`) rejected anywhere, or an
invalid one accepted to the end, is a wrong answer. JSON Schema's reading on
all three: extra properties allowed unless the schema says otherwise
(brioche strict=false, xgrammar strict_mode=False, llguidance's default);
free whitespace (brioche and xgrammar at most 20 blanks in a row, llguidance
unbounded). Corpus: bench/schema_corpus/corpus.json.zst
(tools/oracle/schema_corpus.py says where each schema comes from).

  cmake --build build/<dir> --target schema_corpus_bench
  python3 bench/schema_corpus.py --brioche build/<dir>/bench/schema_corpus_bench [--out results.json] [--limit N]

Needs xgrammar, llguidance, tokenizers, transformers, torch (bench only, not
in scripts/setup.sh).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
TOKENIZER = "/work/shared/fixtures/tokenizers/llama3/tokenizer.json.zst"
if not os.path.exists(TOKENIZER):
    TOKENIZER = os.path.join(ROOT, "tests/fixtures/tokenizers/llama3/tokenizer.json.zst")
EOS = [128009, 128001]


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def zstd_text(path):
    return subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout.decode()


def bit(mask_words, i):
    return (int(mask_words[i >> 5]) >> (i & 31)) & 1


def in_child(fn, timeout_s):
    """fn() in a forked child; None when it runs past timeout_s (it is killed)."""
    import multiprocessing
    import queue

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=lambda: q.put(fn()))
    p.start()
    try:
        r = q.get(timeout=timeout_s)
    except queue.Empty:
        r = None
    p.kill()
    p.join()
    return r


def timed_out(timeout_s):
    return {"compiled": False, "error": f"timeout: compile + walks past {timeout_s} s", "compile_ms": None,
            "accepted": [], "mask_us": []}


def run_xgrammar(schemas, tok_json_path, timeout_s):
    import numpy as np
    import xgrammar as xgr
    from grammar_vocab import load_vocab

    toks, _ = load_vocab(TOKENIZER)
    info = xgr.TokenizerInfo(toks, xgr.VocabType.RAW, stop_token_ids=EOS)
    V = len(toks)
    results = []
    for n, e in enumerate(schemas):
        results.append(in_child(lambda: one_xgrammar(xgr, np, info, V, e), timeout_s) or timed_out(timeout_s))
        print(f"\rxgrammar {n + 1}/{len(schemas)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return results


def one_xgrammar(xgr, np, info, V, e):
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t0 = time.perf_counter()
    try:
        compiled = compiler.compile_json_schema(json.dumps(e["schema"]), any_whitespace=True,
                                                max_whitespace_cnt=20, strict_mode=False)
        err = None
    except Exception as ex:  # noqa: BLE001 (any refusal counts as not compiled)
        compiled, err = None, str(ex)[:300]
    r = {"compiled": compiled is not None, "error": err, "compile_ms": (time.perf_counter() - t0) * 1e3,
         "accepted": [], "mask_us": []}
    if compiled is not None:
        bm = xgr.allocate_token_bitmask(1, V)
        for inst in e["instances"]:
            m = xgr.GrammarMatcher(compiled)
            ok = True

            def allowed(i):
                t = time.perf_counter_ns()
                m.fill_next_token_bitmask(bm)
                r["mask_us"].append((time.perf_counter_ns() - t) / 1e3)
                return bit(bm[0].numpy().view(np.uint32), i)

            for i in inst["ids"]:
                if not allowed(i) or not m.accept_token(i):
                    ok = False
                    break
            r["accepted"].append(bool(ok and allowed(EOS[0])))
    return r


def run_llguidance(schemas, tok_json_path, timeout_s):
    import llguidance
    import llguidance.hf
    import numpy as np
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=tok_json_path)
    lltok = llguidance.hf.from_tokenizer(hf, eos_token=EOS[0])
    results = []
    for n, e in enumerate(schemas):
        results.append(in_child(lambda: one_llguidance(llguidance, np, lltok, e), timeout_s) or timed_out(timeout_s))
        print(f"\rllguidance {n + 1}/{len(schemas)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return results


def one_llguidance(llguidance, np, lltok, e):
    t0 = time.perf_counter()
    err = None
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(e["schema"], defaults={"whitespace_flexible": True})
        m0 = llguidance.LLMatcher(lltok, grammar, log_level=0)
        if m0.is_error():
            err = m0.get_error()[:300]
    except Exception as ex:  # noqa: BLE001
        err = str(ex)[:300]
    r = {"compiled": err is None, "error": err, "compile_ms": (time.perf_counter() - t0) * 1e3,
         "accepted": [], "mask_us": []}
    if err is None:
        for inst in e["instances"]:
            m = llguidance.LLMatcher(lltok, grammar, log_level=0)
            ok = True

            def allowed(i):
                t = time.perf_counter_ns()
                mask = m.compute_bitmask()
                r["mask_us"].append((time.perf_counter_ns() - t) / 1e3)
                return bit(np.frombuffer(mask, dtype=np.uint32), i)

            for i in inst["ids"]:
                if not allowed(i) or not m.consume_token(i):
                    ok = False
                    break
            r["accepted"].append(bool(ok and allowed(EOS[0])))
    return r


def run_brioche(binary, schemas):
    with tempfile.TemporaryDirectory() as tmp:
        prepared = os.path.join(tmp, "prepared.json")
        with open(prepared, "w") as f:
            json.dump({"eos": EOS, "schemas": [{"schema": e["schema"], "instances": e["instances"]} for e in schemas]}, f)
        out = os.path.join(tmp, "out.jsonl")
        subprocess.run([binary, TOKENIZER, prepared, out], check=True)
        with open(out) as f:
            return [json.loads(line) for line in f]


def summarize(name, schemas, results):
    compiled = [r for r in results if r["compiled"]]
    timeouts = sum(1 for r in results if (r.get("error") or "").startswith("timeout"))
    valid_total = valid_rejected = invalid_total = invalid_accepted = 0
    for e, r in zip(schemas, results):
        if not r["compiled"]:
            continue
        for inst, acc in zip(e["instances"], r["accepted"]):
            if inst["valid"]:
                valid_total += 1
                valid_rejected += not acc
            else:
                invalid_total += 1
                invalid_accepted += acc
    compile_ms = [r["compile_ms"] for r in compiled]
    masks = [m for r in compiled for m in r["mask_us"]]
    return {"engine": name, "schemas": len(results), "compiled": len(compiled),
            "valid_total": valid_total, "valid_rejected": valid_rejected,
            "invalid_total": invalid_total, "invalid_accepted": invalid_accepted,
            "compile_ms": [percentile(compile_ms, 0.5), percentile(compile_ms, 0.99), max(compile_ms or [float("nan")])],
            "mask_us": [percentile(masks, 0.5), percentile(masks, 0.99), max(masks or [float("nan")])],
            "mask_steps": len(masks), "timeouts": timeouts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", required=True, help="path to the schema_corpus_bench binary")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "bench/schema_corpus/corpus.json.zst"))
    ap.add_argument("--out", default=None, help="write per-schema results here (JSON)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--engines", default="brioche,llguidance,xgrammar")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="xgrammar/llguidance: seconds per schema (compile + walks) before it counts as not compiled")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    corpus = json.loads(zstd_text(args.corpus))
    tok_text = zstd_text(TOKENIZER)
    tok = Tokenizer.from_str(tok_text)
    schemas = []
    for e in corpus["schemas"][: args.limit or None]:
        inst = [{"text": t, "valid": True} for t in e["valid"]] + [{"text": t, "valid": False} for t in e["invalid"]]
        for i in inst:
            i["ids"] = tok.encode(i["text"], add_special_tokens=False).ids
        schemas.append({"source": e["source"], "schema": e["schema"], "instances": inst})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(tok_text)
        tok_json_path = f.name
    runners = {"brioche": lambda: run_brioche(args.brioche, schemas),
               "xgrammar": lambda: run_xgrammar(schemas, tok_json_path, args.timeout),
               "llguidance": lambda: run_llguidance(schemas, tok_json_path, args.timeout)}
    per_engine, rows = {}, []
    for name in args.engines.split(","):
        per_engine[name] = runners[name]()
        rows.append(summarize(name, schemas, per_engine[name]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.out:  # each engine's results as soon as they exist
            with open(f"{args.out}.{name}.json", "w") as f:
                json.dump(per_engine[name], f)
    os.unlink(tok_json_path)
    n_valid = sum(i["valid"] for e in schemas for i in e["instances"])
    n_invalid = sum(not i["valid"] for e in schemas for i in e["instances"])
    print(f"{len(schemas)} schemas, {n_valid} valid and {n_invalid} invalid instances; Llama-3 tokenizer, one thread")
    print("| engine | schemas compiled | valid instances wrongly rejected | invalid wrongly accepted | "
          "compile p50 / p99 / max | mask p50 / p99 / max |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        c, m = r["compile_ms"], r["mask_us"]
        print(f"| {r['engine']} | {r['compiled']} ({100 * r['compiled'] / max(1, r['schemas']):.0f}%) | "
              f"{r['valid_rejected']} of {r['valid_total']} | {r['invalid_accepted']} of {r['invalid_total']} | "
              f"{c[0]:.1f} ms / {c[1]:.0f} ms / {c[2]:.0f} ms | {m[0]:.1f} µs / {m[1]:.0f} µs / {m[2]:.0f} µs |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": rows, "schemas": [
                {"source": e["source"], **{name: {k: v for k, v in per_engine[name][i].items() if k != "mask_us"}
                                           for name in per_engine}} for i, e in enumerate(schemas)]}, f, indent=1)


if __name__ == "__main__":
    main()
