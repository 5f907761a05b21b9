#!/usr/bin/env python3
"""Preference pairs of chosen lengths for timing `brioche train` (bench/train_cli).

    make_pairs.py OUT_DIR --pairs 6 --prompt-words 2000 --response-words 4050 [--jitter 0.2]

Words are drawn from a fixed vocabulary with a seeded RNG; with --jitter each
pair's lengths vary by up to that fraction, so batches are of varied lengths
as a user's data would be. Writes OUT_DIR/train.jsonl ({prompt, chosen, rejected}).
"""
import argparse
import json
import os
import random

WORDS = ("the of and a to in is you that it he was for on are as with his they at be this have from or one had "
         "by word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write go "
         "see number no way could people my than first water been call who oil its now find long down day did get "
         "come made may part").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--prompt-words", type=int, default=2000)
    ap.add_argument("--response-words", type=int, default=4050)
    ap.add_argument("--jitter", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)

    def n(words):
        return max(1, int(words * (1 - a.jitter * rng.random())))

    with open(os.path.join(a.out, "train.jsonl"), "w") as f:
        for _ in range(a.pairs):
            row = {"prompt": text(rng, n(a.prompt_words)), "chosen": text(rng, n(a.response_words)),
                   "rejected": text(rng, n(a.response_words))}
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
