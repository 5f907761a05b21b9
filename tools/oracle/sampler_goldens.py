#!/usr/bin/env python3
"""Goldens for src/engine/sampler: processed logits from HF transformers' own
logits processors, raw logprobs from torch.log_softmax, and reference outputs
of the sampler's RNG (xoshiro256** seeded by splitmix64, written here from the
published algorithm, independently of the C++).

Chain, as brioche applies it (see src/engine/sampler.h):
  RepetitionPenaltyLogitsProcessor (prompt + output)
  presence/frequency penalties (OpenAI formula; HF has none, so done here in torch)
  SequenceBiasLogitsProcessor with single-token sequences (= OpenAI logit_bias)
  grammar mask (-inf where the bit is clear)
  greedy: argmax; else TemperatureLogitsWarper, TopKLogitsWarper,
  TopPLogitsWarper, MinPLogitsWarper.

Cases whose top-p / min-p / top-k boundary lies within float rounding of a
token are redrawn, so the goldens test the semantics, not rounding luck.

Usage: python3 tools/oracle/sampler_goldens.py  (writes tests/engine/golden/sampler_processors.json)
"""
import base64
import json
import math
import pathlib

import numpy as np
import torch
import transformers
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/engine/golden/sampler_processors.json"
MASK64 = (1 << 64) - 1


def b64_f32(a):
    return base64.b64encode(np.asarray(a, dtype="<f4").tobytes()).decode()


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


def xoshiro_outputs(seed, n):
    s, st = [], seed
    for _ in range(4):
        st, v = splitmix64(st)
        s.append(v)
    out = []
    for _ in range(n):
        out.append(rotl((s[1] * 5) & MASK64, 7) * 9 & MASK64)
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return out


def near_boundary(scores, p):
    """True if the top-k / top-p / min-p decision of some token is within
    rounding distance of flipping (scores: temperature-scaled, 1-D float32)."""
    x = scores.double()
    finite = torch.isfinite(x)
    vals = x[finite].sort(descending=True).values
    if p["top_k"] > 0 and p["top_k"] < len(vals):
        if abs(vals[p["top_k"] - 1] - vals[p["top_k"]]) < 1e-5:
            return True
        vals = vals[vals >= vals[p["top_k"] - 1]]
    if p["top_p"] < 1.0:
        probs = torch.softmax(vals, 0)
        above = torch.cumsum(probs, 0) - probs
        # Only the pair of tokens straddling top_p decides; float32 cumsum in
        # HF over thousands of tokens carries ~1e-6 error.
        if (above[1:] - p["top_p"]).abs().min() < 1e-5:  # the first token is always kept
            return True
    if p["min_p"] > 0.0:
        ratio = torch.exp(vals - vals[0])
        if ((ratio - p["min_p"]).abs() / p["min_p"]).min() < 1e-4:
            return True
    return False


def make_case(rng, name, vocab, scale, params, prompt_len, output_len, mask_density=None):
    for _attempt in range(100):
        logits = torch.from_numpy((rng.standard_normal(vocab) * scale).astype(np.float32))
        prompt = rng.integers(0, min(vocab, 50), prompt_len).tolist()
        output = rng.integers(0, min(vocab, 50), output_len).tolist()
        mask_words = None
        allowed = torch.ones(vocab, dtype=torch.bool)
        if mask_density is not None:
            allowed = torch.from_numpy(rng.random(vocab) < mask_density)
            allowed[int(torch.argmin(logits))] = True  # keep a weak token allowed: mask must matter
            words = np.zeros((vocab + 31) // 32, dtype=np.uint64)
            for t in np.nonzero(allowed.numpy())[0]:
                words[t // 32] |= np.uint64(1) << np.uint64(t % 32)
            mask_words = [int(w) for w in words]

        p = dict(params)
        scores = logits[None].clone()
        ids = torch.tensor([prompt + output], dtype=torch.long)
        if p["repetition_penalty"] != 1.0:
            scores = RepetitionPenaltyLogitsProcessor(p["repetition_penalty"])(ids, scores)
        if output and (p["presence_penalty"] or p["frequency_penalty"]):
            counts = torch.bincount(torch.tensor(output), minlength=vocab).to(torch.float32)
            penalty = torch.tensor(p["frequency_penalty"], dtype=torch.float32) * counts
            penalty = torch.where(counts > 0, torch.tensor(p["presence_penalty"], dtype=torch.float32) + penalty, penalty)
            scores = scores - penalty
        if p["logit_bias"]:
            scores = SequenceBiasLogitsProcessor([[[t], b] for t, b in p["logit_bias"]])(ids, scores)
        scores = scores.masked_fill(~allowed[None], -math.inf)

        if p["temperature"] == 0.0:
            expected_token = int(torch.argmax(scores[0]))
        else:
            scores = TemperatureLogitsWarper(p["temperature"])(ids, scores)
            if near_boundary(scores[0], p):
                continue
            if p["top_k"] > 0:
                scores = TopKLogitsWarper(p["top_k"])(ids, scores)
            if p["top_p"] < 1.0:
                scores = TopPLogitsWarper(p["top_p"])(ids, scores)
            if p["min_p"] > 0.0:
                scores = MinPLogitsWarper(p["min_p"])(ids, scores)
            expected_token = None

        log_probs = torch.log_softmax(logits.double(), 0)
        top = torch.topk(log_probs, 5)
        case = {
            "name": name,
            "vocab": vocab,
            "params": p,
            "prompt": prompt,
            "output": output,
            "mask": mask_words,
            "logits": b64_f32(logits.numpy()),
            "processed": b64_f32(scores[0].numpy()),
            "kept": int(torch.isfinite(scores[0]).sum()),
            "raw_top5": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
        }
        if expected_token is not None:
            case["greedy_token"] = expected_token
            case["greedy_raw_logprob"] = float(log_probs[expected_token])
        return case
    raise RuntimeError(f"case {name}: could not draw logits away from the boundaries")


def params(**kw):
    p = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
             presence_penalty=0.0, frequency_penalty=0.0, logit_bias=[])
    p.update(kw)
    return p


def main():
    rng = np.random.default_rng(20240611)
    cases = []
    add = lambda *a, **k: cases.append(make_case(rng, *a, **k))
    for vocab, scale in [(17, 1.0), (1000, 2.0), (6000, 3.0)]:
        tag = f"v{vocab}"
        add(f"{tag}_temperature", vocab, scale, params(temperature=0.7), 0, 0)
        add(f"{tag}_top_k", vocab, scale, params(temperature=1.3, top_k=5), 0, 0)
        add(f"{tag}_top_p", vocab, scale, params(temperature=0.9, top_p=0.8), 0, 0)
        add(f"{tag}_min_p", vocab, scale, params(temperature=1.1, min_p=0.05), 0, 0)
        add(f"{tag}_all_filters", vocab, scale, params(temperature=0.8, top_k=12, top_p=0.7, min_p=0.1), 0, 0)
        add(f"{tag}_penalties", vocab, scale,
            params(temperature=1.0, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.4), 12, 9)
        add(f"{tag}_bias_mask", vocab, scale,
            params(temperature=1.0, top_p=0.95, logit_bias=[[3, 4.5], [7, -100.0], [11, 2.0]]), 0, 0,
            mask_density=0.5)
        add(f"{tag}_greedy_penalties", vocab, scale,
            params(temperature=0.0, repetition_penalty=1.5, frequency_penalty=0.7, logit_bias=[[5, 1.0]]), 20, 15)
        add(f"{tag}_greedy_mask", vocab, scale, params(temperature=0.0), 0, 0, mask_density=0.2)
    # Large flat vocabularies: the nucleus holds thousands of tokens, so the
    # sampler's growing partial selection must extend several times.
    add("v20000_flat_top_p", 20000, 0.5, params(temperature=1.0, top_p=0.9), 0, 0)
    add("v20000_peaked_top_p", 20000, 6.0, params(temperature=0.6, top_p=0.95), 0, 0)
    add("v20000_top_k_top_p", 20000, 1.0, params(temperature=1.0, top_k=3000, top_p=0.5), 0, 0)
    add("v20000_top_p_zero", 20000, 1.0, params(temperature=1.0, top_p=0.0), 0, 0)
    add("v20000_min_p_all", 20000, 2.0,
        params(temperature=1.5, top_k=200, top_p=0.9, min_p=0.02, repetition_penalty=1.2,
               presence_penalty=0.3, frequency_penalty=0.2, logit_bias=[[40, 3.0]]), 30, 30, mask_density=0.8)

    golden = {
        "generator": "tools/oracle/sampler_goldens.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "float_encoding": "base64 of little-endian float32",
        "rng": [{"seed": s, "u64": [str(v) for v in xoshiro_outputs(s, 8)]}
                for s in (0, 42, 0xFFFFFFFFFFFFFFFF)],
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
