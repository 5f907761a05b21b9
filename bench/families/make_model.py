#!/usr/bin/env python3
"""A random-weight Gemma 4 or Qwen 3.5 checkpoint at a named shape, as a
Hugging Face safetensors directory: config.json exactly as transformers 5.25
writes it (bench/families/configs/<shape>.json, made by write_configs.py),
the tensor names and shapes transformers' `Gemma4ForCausalLM` /
`Qwen3_5ForCausalLM` / `Qwen3_5MoeForCausalLM` save (the text-only layout:
`model.*`; released checkpoints are multimodal and prefix
`model.language_model.`, which brioche reads the same way), and the fixture
tokenizers (tests/fixtures/{gemma4/e2b,qwen35/dense}: 320 / 512 tokens),
their vocabularies filled with "fill<id>" tokens up to the model's rows.

Needs only torch. The safetensors file is written here (8-byte little-endian
header length, the JSON header padded with spaces to a multiple of 8, then
each tensor's raw little-endian bytes back to back), tensor by tensor:
generated on CUDA when there is a GPU, copied out and written in pieces of
at most 256 MB by a writer thread, so a 20 GB model needs neither 2x host
memory nor a GPU (the CPU path is the same, slower).

Values: matrices and embeddings N(0, 0.02) (transformers' initializer_range),
Gemma's norms 1 (x * w), Qwen's zero-centred norms 0 (x * (1 + w)), the
gated norm 1, layer_scalar 1, dt_bias 1, A_log = log U(0.01, 16) (as
transformers initialises them), the conv N(0, 0.02).

--bits 4|8: every linear and embedding matrix (input width a multiple of
--group-size) as MLX affine quantization (U32 words, element j at bit
j*bits, BF16 scales and biases [out, in / group]) with random codes and a
scale giving std ~0.02; Qwen's routers (`mlp.gate`, `shared_expert_gate`) at
8 bits as mlx-lm's quant predicate keeps them; config.json gains
`quantization` and `quantization_config` as mlx-lm writes them. The tensor
names stay transformers' (brioche reads a quantized linear by its
`.scales`; this is not mlx-lm's own re-layout).

--layers N keeps the first N layers of the real shape (layer_types cut,
per_layer_config keys past N dropped; KV-shared layers scaled to N's
share), for the shapes too large to write whole; the directory's
brioche_shape.json records the shape, N and the real layer count.

  python3 bench/families/make_model.py --shape gemma4-e4b --out /tmp/e4b [--bits 4] [--layers N] [--seed 0]
"""
import argparse
import json
import math
import os
import queue
import shutil
import struct
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKENIZERS = {"gemma4": os.path.join(ROOT, "tests", "fixtures", "gemma4", "e2b"),
              "qwen35": os.path.join(ROOT, "tests", "fixtures", "qwen35", "dense")}
CHUNK_BYTES = 256 << 20
STD = 0.02


def shape_names():
    return sorted(f[:-5] for f in os.listdir(os.path.join(HERE, "configs")) if f.endswith(".json"))


def load_config(shape):
    path = os.path.join(HERE, "configs", shape + ".json")
    if not os.path.exists(path):
        sys.exit(f"make_model: no shape '{shape}' (expected one of {', '.join(shape_names())})")
    with open(path) as f:
        return json.load(f)


def family(config):
    t = config["model_type"]
    if t.startswith("gemma4"):
        return "gemma4"
    if t.startswith("qwen3_5"):
        return "qwen35"
    raise ValueError(f"unknown model_type {t!r}")


def cut_layers(config, n):
    """The first n layers of config (a copy); the last one must be a full layer."""
    c = json.loads(json.dumps(config))
    old = c["num_hidden_layers"]
    if not 0 < n <= old:
        sys.exit(f"make_model: --layers {n}: expected 1..{old}")
    c["num_hidden_layers"] = n
    c["layer_types"] = c["layer_types"][:n]
    if c["layer_types"][-1] != "full_attention":
        sys.exit(f"make_model: --layers {n}: layer {n - 1} is {c['layer_types'][-1]}; the last layer must be full")
    if "per_layer_config" in c:
        c["per_layer_config"] = {k: v for k, v in c["per_layer_config"].items() if int(k) < n}
    if c.get("num_kv_shared_layers"):
        c["num_kv_shared_layers"] = c["num_kv_shared_layers"] * n // old
    return c


# ---------------------------------------------------------------- tensor lists
# Each entry: (name, shape, kind). kind: "matrix" (a linear or embedding,
# quantizable), "ones", "zeros", "normal" (never quantized), "a_log".


def gemma4_layer_dims(c, i):
    # transformers writes the keys zero-padded past 9 layers ("05"): compare them as numbers
    over = {int(k): v for k, v in c.get("per_layer_config", {}).items()}.get(i, {})
    return over.get("head_dim", c["head_dim"]), over.get("num_key_value_heads", c["num_key_value_heads"])


def gemma4_kv_shared(c, i):
    n = c.get("num_kv_shared_layers") or 0
    return n > 0 and i >= c["num_hidden_layers"] - n


def gemma4_tensors(c):
    if c.get("enable_moe_block"):
        raise ValueError("gemma4 MoE shapes are not written by this script")
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    P = c.get("hidden_size_per_layer_input") or 0
    t = [("model.embed_tokens.weight", [V, H], "matrix"), ("model.norm.weight", [H], "ones")]
    if not c.get("tie_word_embeddings", True):
        t.append(("lm_head.weight", [V, H], "matrix"))
    if P:
        t += [("model.embed_tokens_per_layer.weight", [c["vocab_size_per_layer_input"], L * P], "matrix"),
              ("model.per_layer_model_projection.weight", [L * P, H], "matrix"),
              ("model.per_layer_projection_norm.weight", [P], "ones")]
    nh = c["num_attention_heads"]
    for i in range(L):
        p = f"model.layers.{i}."
        hd, kvh = gemma4_layer_dims(c, i)
        full = c["layer_types"][i] == "full_attention"
        shared = gemma4_kv_shared(c, i)
        inter = c["intermediate_size"] * (2 if c.get("use_double_wide_mlp") and shared else 1)
        t += [(p + "input_layernorm.weight", [H], "ones"),
              (p + "self_attn.q_proj.weight", [nh * hd, H], "matrix"),
              (p + "self_attn.q_norm.weight", [hd], "ones")]
        if not shared:
            t += [(p + "self_attn.k_proj.weight", [kvh * hd, H], "matrix"),
                  (p + "self_attn.k_norm.weight", [hd], "ones")]
            if not (c.get("attention_k_eq_v") and full):
                t.append((p + "self_attn.v_proj.weight", [kvh * hd, H], "matrix"))
        t += [(p + "self_attn.o_proj.weight", [H, nh * hd], "matrix"),
              (p + "post_attention_layernorm.weight", [H], "ones"),
              (p + "pre_feedforward_layernorm.weight", [H], "ones"),
              (p + "post_feedforward_layernorm.weight", [H], "ones"),
              (p + "mlp.gate_proj.weight", [inter, H], "matrix"),
              (p + "mlp.up_proj.weight", [inter, H], "matrix"),
              (p + "mlp.down_proj.weight", [H, inter], "matrix"),
              (p + "layer_scalar", [1], "ones")]
        if P:
            t += [(p + "per_layer_input_gate.weight", [P, H], "matrix"),
                  (p + "per_layer_projection.weight", [H, P], "matrix"),
                  (p + "post_per_layer_input_norm.weight", [H], "ones")]
    return t


def qwen35_tensors(c):
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    moe = "num_experts" in c
    t = [("model.embed_tokens.weight", [V, H], "matrix"), ("model.norm.weight", [H], "zeros")]
    if not c.get("tie_word_embeddings", False):
        t.append(("lm_head.weight", [V, H], "matrix"))
    nh, kvh, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    nk, nv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    conv_dim = 2 * nk * dk + nv * dv
    for i in range(L):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", [H], "zeros"), (p + "post_attention_layernorm.weight", [H], "zeros")]
        if c["layer_types"][i] == "linear_attention":
            a = p + "linear_attn."
            t += [(a + "in_proj_qkv.weight", [conv_dim, H], "matrix"),
                  (a + "in_proj_z.weight", [nv * dv, H], "matrix"),
                  (a + "in_proj_b.weight", [nv, H], "matrix"),
                  (a + "in_proj_a.weight", [nv, H], "matrix"),
                  (a + "conv1d.weight", [conv_dim, 1, c["linear_conv_kernel_dim"]], "normal"),
                  (a + "dt_bias", [nv], "ones"),
                  (a + "A_log", [nv], "a_log"),
                  (a + "norm.weight", [dv], "ones"),
                  (a + "out_proj.weight", [H, nv * dv], "matrix")]
        else:
            a = p + "self_attn."
            t += [(a + "q_proj.weight", [nh * hd * 2, H], "matrix"),
                  (a + "k_proj.weight", [kvh * hd, H], "matrix"),
                  (a + "v_proj.weight", [kvh * hd, H], "matrix"),
                  (a + "o_proj.weight", [H, nh * hd], "matrix"),
                  (a + "q_norm.weight", [hd], "zeros"),
                  (a + "k_norm.weight", [hd], "zeros")]
        m = p + "mlp."
        if moe:
            E, Im, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            t.append((m + "gate.weight", [E, H], "router"))
            for e in range(E):
                x = f"{m}experts.{e}."
                t += [(x + "gate_proj.weight", [Im, H], "matrix"), (x + "up_proj.weight", [Im, H], "matrix"),
                      (x + "down_proj.weight", [H, Im], "matrix")]
            t += [(m + "shared_expert.gate_proj.weight", [Is, H], "matrix"),
                  (m + "shared_expert.up_proj.weight", [Is, H], "matrix"),
                  (m + "shared_expert.down_proj.weight", [H, Is], "matrix"),
                  (m + "shared_expert_gate.weight", [1, H], "router")]
        else:
            I = c["intermediate_size"]
            t += [(m + "gate_proj.weight", [I, H], "matrix"), (m + "up_proj.weight", [I, H], "matrix"),
                  (m + "down_proj.weight", [H, I], "matrix")]
    return t


def tensor_list(config):
    return gemma4_tensors(config) if family(config) == "gemma4" else qwen35_tensors(config)


# ------------------------------------------------------------ file entries
# An entry is what goes into the file: (name, dtype, shape, maker), where
# maker(generator, device, row0, rows) returns rows [row0, row0 + rows) as a
# tensor whose bytes are the file's.


def float_maker(kind, shape):
    def make(gen, device, row0, rows):
        s = [rows] + shape[1:]
        if kind in ("matrix", "router", "normal"):
            return (torch.randn(s, generator=gen, device=device) * STD).to(torch.bfloat16)
        if kind == "ones":
            return torch.ones(s, device=device, dtype=torch.bfloat16)
        if kind == "zeros":
            return torch.zeros(s, device=device, dtype=torch.bfloat16)
        if kind == "a_log":
            return (torch.rand(s, generator=gen, device=device) * (16 - 0.01) + 0.01).log().to(torch.bfloat16)
        raise ValueError(kind)
    return make


def quantized_entries(name, shape, bits, group):
    """MLX affine: q uniform over [0, 2^bits), scale s with s * std(q) = STD, bias = -s * (2^bits - 1) / 2."""
    prefix = name[: -len(".weight")]
    out, inp = shape[0], shape[1]
    levels = (1 << bits) - 1
    scale = STD / math.sqrt(((levels + 1) ** 2 - 1) / 12.0)

    def words(gen, device, row0, rows):
        # every bit pattern of the u32 words, held as int32 (the same bytes)
        return torch.randint(-2 ** 31, 2 ** 31, (rows, inp * bits // 32), generator=gen, device=device,
                             dtype=torch.int32)

    def const(value):
        return lambda gen, device, row0, rows: torch.full((rows, inp // group), value, device=device,
                                                          dtype=torch.bfloat16)

    return [(prefix + ".weight", "U32", [out, inp * bits // 32], words),
            (prefix + ".scales", "BF16", [out, inp // group], const(scale)),
            (prefix + ".biases", "BF16", [out, inp // group], const(-scale * levels / 2))]


def file_entries(tensors, bits, group):
    entries, overrides = [], {}
    for name, shape, kind in tensors:
        quantizable = kind in ("matrix", "router") and len(shape) == 2 and shape[1] % group == 0
        if bits and quantizable:
            b = 8 if kind == "router" else bits
            if b != bits:
                overrides[name[: -len(".weight")]] = {"group_size": group, "bits": b}
            entries += quantized_entries(name, shape, b, group)
        else:
            entries.append((name, "BF16", shape, float_maker(kind, shape)))
    return entries, overrides


def write_tokenizer(src, out, vocab_size):
    """The fixture's tokenizer, its BPE vocabulary filled up to the model's rows with tokens "fill<id>"
    (plain ASCII, which byte-level BPE decodes as itself; no merge makes them, so no text encodes to
    them): brioche's engine refuses a model whose embedding has far more rows than its tokenizer has
    ids (untrained rows sampling would pick), and random weights pick any of the 262,144 ids."""
    shutil.copy(os.path.join(src, "tokenizer_config.json"), os.path.join(out, "tokenizer_config.json"))
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    for i in range(max(used) + 1, vocab_size):
        vocab[f"fill{i}"] = i
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)


# ------------------------------------------------------------------ writing
DTYPE_BYTES = {"BF16": 2, "U32": 4, "F32": 4}


def header_bytes(entries):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, _ in entries:
        n = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_safetensors(path, entries, device, seed):
    head, total = header_bytes(entries)
    gen = torch.Generator(device=device).manual_seed(seed)
    pieces = queue.Queue(maxsize=4)
    failure = []

    def writer(f):
        try:
            while (piece := pieces.get()) is not None:
                f.write(piece.numpy().data)
        except Exception as e:  # reported by the main thread
            failure.append(e)
            while pieces.get() is not None:
                pass

    written = 0
    with open(path, "wb") as f:
        f.write(head)
        thread = threading.Thread(target=writer, args=(f,))
        thread.start()
        try:
            for name, dtype, shape, make in entries:
                row_bytes = math.prod(shape[1:]) * DTYPE_BYTES[dtype]
                rows_per_piece = max(1, CHUNK_BYTES // max(row_bytes, 1))
                for row0 in range(0, shape[0], rows_per_piece):
                    rows = min(rows_per_piece, shape[0] - row0)
                    t = make(gen, device, row0, rows)
                    assert list(t.shape) == [rows] + shape[1:], (name, t.shape, shape)
                    pieces.put(t.contiguous().view(torch.uint8).reshape(-1).cpu())
                    written += t.numel() * DTYPE_BYTES[dtype]
                    if failure:
                        raise failure[0]
        finally:
            pieces.put(None)
            thread.join()
        if failure:
            raise failure[0]
    assert written == total, (written, total)
    return len(head) + total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, help="one of: " + ", ".join(shape_names()))
    ap.add_argument("--out", required=True)
    ap.add_argument("--bits", type=int, default=0, choices=[0, 4, 8], help="MLX affine quantization (0: bf16)")
    ap.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128])
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t0 = time.time()
    config = load_config(a.shape)
    real_layers = config["num_hidden_layers"]
    if a.layers:
        config = cut_layers(config, a.layers)
    fam = family(config)
    entries, overrides = file_entries(tensor_list(config), a.bits, a.group_size)
    if a.bits:
        q = {"group_size": a.group_size, "bits": a.bits, "mode": "affine", **overrides}
        config["quantization"] = q
        config["quantization_config"] = q
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_tokenizer(TOKENIZERS[fam], a.out, config["vocab_size"])
    size = write_safetensors(os.path.join(a.out, "model.safetensors"), entries, a.device, a.seed)
    with open(os.path.join(a.out, "brioche_shape.json"), "w") as f:
        json.dump({"shape": a.shape, "layers": config["num_hidden_layers"], "real_layers": real_layers,
                   "bits": a.bits, "group_size": a.group_size if a.bits else None, "seed": a.seed}, f)
        f.write("\n")
    print(f"make_model: {a.shape}{' 4-bit' if a.bits == 4 else ' 8-bit' if a.bits == 8 else ' bf16'}, "
          f"{config['num_hidden_layers']} of {real_layers} layers, {size / 1e9:.2f} GB -> {a.out} "
          f"({time.time() - t0:.1f} s on {a.device})", flush=True)


if __name__ == "__main__":
    main()
