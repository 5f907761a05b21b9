#!/usr/bin/env python3
"""Encode speed, side by side: Hugging Face `tokenizers` (single-threaded,
RAYON_NUM_THREADS=1, one encode() call per document, no encode_batch) vs
brioche's tokenizer (bench/tokenizer_bench.cpp), on the 1.1 MB test corpus.

Usage: python3 bench/tokenizer_bench.py [--bin build/cpu/bench/tokenizer_bench] [--repeat 3]
Prints MB/s for both, per tokenizer; best of --repeat runs each.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
import tokenizer_goldens  # noqa: E402


def read_corpus():
    raw = tokenizer_goldens.zstd_read(os.path.join(ROOT, "tests", "tokenizer", "golden", "corpus.bin.zst"))
    pos = raw.index(b"\n", raw.index(b"\n") + 1) + 1
    n = struct.unpack_from("<I", raw, pos)[0]
    pos += 4
    docs = []
    for _ in range(n):
        length = struct.unpack_from("<I", raw, pos)[0]
        pos += 4
        docs.append(raw[pos:pos + length].decode("utf-8"))
        pos += length
    return docs, raw


def time_hf(tok, docs, repeat):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for d in docs:
            tok.encode(d, add_special_tokens=False)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "cpu", "bench", "tokenizer_bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gguf", default=os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    docs, _ = read_corpus()
    total = sum(len(d.encode("utf-8")) for d in docs)
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path = os.path.join(tmp, "docs.bin")
        with open(corpus_path, "wb") as f:
            f.write(struct.pack("<I", len(docs)))
            for d in docs:
                b = d.encode("utf-8")
                f.write(struct.pack("<I", len(b)) + b)
        print(f"corpus: {len(docs)} docs, {total / 1e6:.2f} MB; tokenizers {tokenizers.__version__}, single thread")
        print(f"{'tokenizer':<10} {'HF MB/s':>9} {'brioche MB/s':>13} {'speedup':>8}")
        for name in ["llama2", "llama3", "qwen3", "gemma3", "smollm2"]:
            if name == "smollm2":
                hf = tokenizer_goldens.smollm2_from_gguf(args.gguf)
                source = ["--gguf", args.gguf]
            else:
                text = tokenizer_goldens.zstd_read(os.path.join(ROOT, "tests", "fixtures", "tokenizers", name, "tokenizer.json.zst"))
                hf = Tokenizer.from_str(text.decode("utf-8"))
                path = os.path.join(tmp, name + ".json")
                with open(path, "wb") as f:
                    f.write(text)
                source = ["--json", path]
            hf_s = time_hf(hf, docs, args.repeat)
            out = subprocess.run([args.bin, *source, "--corpus", corpus_path, "--repeat", str(args.repeat)],
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out)
            hf_mbs = total / hf_s / 1e6
            print(f"{name:<10} {hf_mbs:>9.2f} {ours['mb_per_s']:>13.2f} {ours['mb_per_s'] / hf_mbs:>7.2f}x"
                  f"   (brioche load {ours['load_seconds']:.2f} s)")


if __name__ == "__main__":
    main()
