#!/usr/bin/env python3
"""The bytes one decode step must read for a Gemma 4 or Qwen 3.5 directory
(bf16 or MLX-quantized), and the tokens/s that a card's memory bandwidth
allows at that count: the bound `brioche bench`'s decode is measured
against (issues 46 and 47: >= 85% / >= 80% of it at batch 1).

What a step at batch 1 must read, counted from the safetensors headers (the
bytes as stored: bf16, or U32 codes + scales + biases):
  - every weight matrix once: attention, MLP, DeltaNet projections and conv,
    norms, Gemma's per-layer-input gates/projections and the model
    projection, the untied head;
  - embedding tables only the token's row: `embed_tokens` (one row) and
    Gemma's `embed_tokens_per_layer` (one row of L x P values, not the
    262,144-row table); a tied head reads `embed_tokens` whole as the head;
  - MoE (Qwen 3.5 `mlp.experts.E.*`, stacked `experts.*` too): the router,
    the shared expert and its gate whole, and only top-k of the E experts
    (k/E of the experts' bytes: experts are all the same size);
  - the KV cache at `--context` positions (default 68: `brioche bench`'s
    `tg 128` runs from position 4 to 132), f16 as the engine's cache: K and
    V of every layer that owns a cache (Gemma's KV-shared layers read their
    source layer's K/V, counted once), min(context, window) positions on
    sliding layers, plus the new row written;
  - Qwen's DeltaNet state per linear layer, f32 as brioche keeps it: the
    conv window ((K-1) x channels) and the recurrent state (value heads x
    dk x dv), read and written back (x2).
Activations, logits and scratch are left out (they are not weight-sized:
e.g. 1 MB of f32 logits at vocab 262,144 against GBs of weights).

At batch B (--batch) the dense weights are still read once; the MoE count
is the expected number of distinct experts B rows pick with uniform
routing, E(1 - (1 - k/E)^B) per layer, and the KV/state bytes scale with B.

  python3 bench/families/bandwidth_bound.py DIR [--bandwidth-tbs 4.8] [--context 68] [--batch 1] [--json | --rate]
Cards: H200 4.8 TB/s, H100 SXM 3.35, H100 NVL 3.9, H100 PCIe 2.0 (--card NAME picks by name).
"""
import argparse
import json
import math
import os
import re
import struct

CARDS = [("H200", 4.8), ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35), ("A100", 2.0)]
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4, "I32": 4, "U8": 1}


def card_bandwidth(name):
    for key, tbs in CARDS:
        if key.lower() in name.lower():
            return tbs
    raise ValueError(f"unknown card {name!r}: pass --bandwidth-tbs")


def tensor_bytes(directory):
    """{name: (bytes, shape)} over every *.safetensors file of the directory."""
    out = {}
    for f in sorted(os.listdir(directory)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                b, e = v["data_offsets"]
                out[k] = (e - b, v["shape"])
    return out


def module_of(name):
    """A tensor's module: 'x.weight' / 'x.scales' / 'x.biases' -> 'x'."""
    return re.sub(r"\.(weight|scales|biases)$", "", name)


def step_bytes(directory, context, batch):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    c = config.get("text_config", config)
    tensors = tensor_bytes(directory)
    gemma = c["model_type"].startswith("gemma4")
    L, H = c["num_hidden_layers"], c["hidden_size"]
    tied = not any(module_of(n).endswith("lm_head") for n in tensors)
    parts = {"weights": 0, "embedding rows": 0, "head": 0, "experts (active)": 0, "kv cache": 0, "recurrent state": 0}
    expert_bytes, n_experts = 0, c.get("num_experts") or 0
    k = c.get("num_experts_per_tok") or c.get("top_k_experts") or 0
    for name, (nbytes, shape) in tensors.items():
        m = module_of(name)
        if m.endswith("embed_tokens") or m.endswith("embed_tokens_per_layer"):
            rows = shape[0]
            parts["embedding rows"] += batch * nbytes // rows
            if m.endswith("embed_tokens") and tied:
                parts["head"] += nbytes
        elif m.endswith("lm_head"):
            parts["head"] += nbytes
        elif re.search(r"\.experts\.(\d+\.)?(gate_up_proj|gate_proj|up_proj|down_proj)$", m) or \
                re.search(r"\.experts\.switch_(glu|mlp)\.", m) or re.search(r"\.switch_mlp\.", m):
            expert_bytes += nbytes
        else:
            parts["weights"] += nbytes
    if n_experts:
        distinct = n_experts * (1 - (1 - k / n_experts) ** batch)
        parts["experts (active)"] = int(expert_bytes * distinct / n_experts)
    # KV cache (f16): layers that own one.
    n_shared = c.get("num_kv_shared_layers") or 0 if gemma else 0
    for i, t in enumerate(c["layer_types"]):
        if t == "linear_attention":
            nk, nv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                              c["linear_value_head_dim"])
            conv = (c["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv) * 4
            parts["recurrent state"] += batch * 2 * (conv + nv * dk * dv * 4)
            continue
        if gemma and n_shared and i >= L - n_shared:
            continue
        over = {int(k): v for k, v in c.get("per_layer_config", {}).items()}.get(i, {}) if gemma else {}
        hd = over.get("head_dim", c["head_dim"])
        kvh = over.get("num_key_value_heads", c["num_key_value_heads"])
        positions = min(context, c["sliding_window"]) if t == "sliding_attention" else context
        parts["kv cache"] += batch * 2 * kvh * hd * 2 * (positions + 1)
    return c, parts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bandwidth-tbs", type=float, default=0, help="card memory bandwidth in TB/s")
    ap.add_argument("--card", default="H200", help="card name (nvidia-smi's), when --bandwidth-tbs is not given")
    ap.add_argument("--context", type=int, default=68)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the explanation")
    ap.add_argument("--rate", action="store_true", help="only the bound, in tokens/s")
    a = ap.parse_args()
    tbs = a.bandwidth_tbs or card_bandwidth(a.card)
    c, parts = step_bytes(a.model, a.context, a.batch)
    total = sum(parts.values())
    bound = a.batch * tbs * 1e12 / total
    if a.rate:
        print(f"{bound:.1f}")
        return
    if a.json:
        print(json.dumps({"bytes": total, "parts": parts, "tbs": tbs, "bound_tokens_per_s": bound,
                          "context": a.context, "batch": a.batch}))
        return
    print(f"{os.path.basename(os.path.normpath(a.model))}: one decode step at batch {a.batch}, context {a.context}:")
    for k, v in parts.items():
        if v:
            print(f"  {k:18s} {v / 1e6:11.3f} MB")
    print(f"  {'total':18s} {total / 1e6:11.3f} MB -> at {tbs} TB/s: {bound:.1f} tokens/s "
          f"({1e3 * total / (tbs * 1e12):.3f} ms a step)")


if __name__ == "__main__":
    main()
