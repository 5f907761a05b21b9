#!/usr/bin/env python3
"""A small "answer in upper case" training set for `brioche train` runs on
random-weight models (device scripts): prompts "<prefix><three words>", the
answer the same words in upper case.

  python3 bench/upper_case_data.py --out DIR --format preference|completion
                                   [--train 24] [--valid 0] [--seed 1] [--prefix "Repeat: "]

preference: {"prompt", "chosen": UPPER, "rejected": lower}; completion:
{"prompt", "completion": " UPPER"}. Writes DIR/train.jsonl (and DIR/valid.jsonl).
"""
import argparse
import json
import os
import random

WORDS = "red blue green quiet loud small big old new warm cold bright dark".split()
NOUNS = "river book house tree road cloud stone bird lamp door".split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--format", choices=["preference", "completion"], required=True)
    ap.add_argument("--train", type=int, default=24)
    ap.add_argument("--valid", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefix", default="Repeat: ")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for name, n in (("train", args.train), ("valid", args.valid)):
        if n == 0:
            continue
        with open(os.path.join(args.out, f"{name}.jsonl"), "w") as f:
            for _ in range(n):
                p = " ".join(rng.sample(WORDS, 2) + [rng.choice(NOUNS)])
                if args.format == "preference":
                    row = {"prompt": args.prefix + p, "chosen": p.upper(), "rejected": p}
                else:
                    row = {"prompt": args.prefix + p, "completion": " " + p.upper()}
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
