"""xgrammar side of bench/grammar_bench.cpp: the same schemas, Llama-3
vocabulary, single thread; compile time p50 of 5 (cache off) and per-token mask
time p50/p99 over seeded random walks (same policy as the C++ bench).

  python3 bench/grammar_xgrammar.py [walks]       # run
  python3 bench/grammar_xgrammar.py --dump        # print the schemas as JSON
"""
import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
from grammar_cases import SCHEMAS  # noqa: E402


def main():
    if "--dump" in sys.argv:
        print(json.dumps([{"name": n, "schema": s} for n, s in SCHEMAS]))
        return
    import numpy as np
    import xgrammar as xgr
    from grammar_vocab import EOS, load_vocab

    walks = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    toks, _ = load_vocab(os.path.join(ROOT, "tests/fixtures/tokenizers/llama3/tokenizer.json.zst"))
    info = xgr.TokenizerInfo(toks, xgr.VocabType.RAW, stop_token_ids=EOS["llama3"])
    tok_len = np.array([len(t) for t in toks])
    V = len(toks)
    print(f"{'schema':16s} {'compile_ms':>10s} {'mask_p50us':>10s} {'mask_p99us':>10s} {'mask_max_us':>10s} {'steps':>8s}")
    all_masks, all_compiles = [], []
    for name, schema in SCHEMAS:
        compiles = []
        for _ in range(5):
            compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            t0 = time.perf_counter()
            compiled = compiler.compile_json_schema(json.dumps(schema), max_whitespace_cnt=20)
            compiles.append((time.perf_counter() - t0) * 1e3)
        masks = []
        rng = random.Random(1234)
        bm = xgr.allocate_token_bitmask(1, V)
        for _ in range(walks):
            m = xgr.GrammarMatcher(compiled)
            for _ in range(64):
                if m.is_terminated():
                    break
                t0 = time.perf_counter_ns()
                m.fill_next_token_bitmask(bm)
                masks.append((time.perf_counter_ns() - t0) / 1e3)
                words = bm[0].numpy().view(np.uint32)
                allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:V].astype(bool)
                ids = np.nonzero(allowed)[0]
                if len(ids) == 0:
                    break
                if allowed[128009] and rng.random() < 0.4:
                    pick = 128009
                else:
                    short = ids[tok_len[ids] == 1]
                    pool = short if len(short) and rng.random() < 0.6 else ids
                    pick = int(pool[rng.randrange(len(pool))])
                m.accept_token(pick)
        c50 = statistics.median(compiles)
        all_compiles.append(c50)
        all_masks += masks
        q = np.percentile(masks, [50, 99, 100])
        print(f"{name:16s} {c50:10.2f} {q[0]:10.2f} {q[1]:10.2f} {q[2]:10.2f} {len(masks):8d}")
    q = np.percentile(all_masks, [50, 99, 100])
    print(f"{'ALL (p50s)':16s} {statistics.median(all_compiles):10.2f} {q[0]:10.2f} {q[1]:10.2f} {q[2]:10.2f} {len(all_masks):8d}")


if __name__ == "__main__":
    main()
