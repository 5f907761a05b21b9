#!/usr/bin/env python3
"""Answers each held-out prompt greedily through `brioche run` (with an
adapter or the base alone) and counts the answers that end with the phrase.

  heldout_phrase.py --brioche build/cpu/brioche --prompts /tmp/ba/heldout.txt \
      [--adapter DIR] [--max-tokens 96] [--phrase "Bon appétit!"] [--json OUT]

Prints one line per prompt (ends / contains / finish reason) and a summary
line; --json writes the same as JSON. Used for the DPO study in
docs/training.md (issue 51).
"""
import argparse
import json
import re
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--adapter")
    ap.add_argument("--model")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--phrase", default="Bon appétit!")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    prompts = [p for p in open(args.prompts, encoding="utf-8").read().splitlines() if p.strip()]
    rows = []
    for p in prompts:
        cmd = [args.brioche, "run", "-p", p, "-n", str(args.max_tokens), "--temp", "0", "-t", str(args.threads)]
        if args.model:
            cmd += ["-m", args.model]
        if args.adapter:
            cmd += ["--adapter", args.adapter]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        m = re.search(r"finish: (\w+)", r.stderr)
        text = r.stdout.strip()
        row = {
            "prompt": p,
            "answer": text,
            "ends_with_phrase": text.endswith(args.phrase),
            "contains_phrase": args.phrase in text,
            "finish": m.group(1) if m else "?",
        }
        rows.append(row)
        print(f"{'END' if row['ends_with_phrase'] else ('HAS' if row['contains_phrase'] else '---')} "
              f"{row['finish']:6s} {p} -> {text[-80:]!r}", flush=True)
    n = len(rows)
    summary = {
        "adapter": args.adapter,
        "prompts": n,
        "ends_with_phrase": sum(r["ends_with_phrase"] for r in rows),
        "contains_phrase": sum(r["contains_phrase"] for r in rows),
        "hit_token_cap": sum(r["finish"] == "length" for r in rows),
    }
    print(f"summary: {summary['ends_with_phrase']}/{n} end with the phrase, {summary['contains_phrase']}/{n} "
          f"contain it, {summary['hit_token_cap']}/{n} ran to the {args.max_tokens}-token cap")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "rows": rows}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
