#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) prompt-processing and generation speed on the
default model: the bar brioche's CPU backend has to meet.

  python3 bench/llama_cpp_peer.py [--threads 2] [--prompt 128] [--gen 64] [--reps 3]

Prints the mean (and best) of --reps tokens/s for prompt eval (one batch of --prompt tokens)
and for generation (--gen single-token decode steps after the prompt).
"""
import argparse
import os
import time

from llama_cpp import Llama, __version__ as llama_cpp_version

MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default=MODEL)
    args = ap.parse_args()
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=1024, n_batch=512, verbose=False)
    text = "The quick brown fox jumps over the lazy dog. " * 64
    prompt = llm.tokenize(text.encode())[: args.prompt]
    assert len(prompt) == args.prompt, len(prompt)
    pps, tgs = [], []
    for _ in range(args.reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        pp = args.prompt / (time.perf_counter() - t0)
        tok = prompt[-1]
        t0 = time.perf_counter()
        for _ in range(args.gen):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        tg = args.gen / (time.perf_counter() - t0)
        pps.append(pp)
        tgs.append(tg)
    print(f"llama-cpp-python {llama_cpp_version}, threads={args.threads}, model={os.path.basename(args.model)}")
    mean = lambda xs: sum(xs) / len(xs)
    print(f"llama.cpp pp{args.prompt}: {mean(pps):.1f} tok/s (best {max(pps):.1f})   "
          f"tg{args.gen}: {mean(tgs):.1f} tok/s (best {max(tgs):.1f})   (mean of {args.reps})")


if __name__ == "__main__":
    main()
