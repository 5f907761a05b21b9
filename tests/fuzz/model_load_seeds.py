#!/usr/bin/env python3
"""Seeds for model_load_fuzz (tests/fuzz/model_load_fuzz.cpp): tiny but
complete models, so that the fuzzer starts from inputs that load and run and
mutates their counts, shapes and config values from there.

Input format of the target: b'G' + a GGUF file, or b'S' + config.json +
b'\\n--\\n' + model.safetensors. Writes tests/fuzz/corpus/model_load/*.
Standard library only:  python3 tests/fuzz/model_load_seeds.py
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "model_load")
rng = random.Random(41)

# GGUF metadata value types and ggml tensor types (ggml.h).
U32, I32, F32, STRING, ARRAY = 4, 5, 6, 8, 9
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(v):
    if isinstance(v, str):
        return struct.pack("<I", STRING) + gguf_string(v)
    if isinstance(v, float):
        return struct.pack("<If", F32, v)
    if isinstance(v, list):  # array of strings
        return struct.pack("<IIQ", ARRAY, STRING, len(v)) + b"".join(gguf_string(s) for s in v)
    return struct.pack("<II", U32, v)


def rows_f32(rows, cols):
    return struct.pack(f"<{rows * cols}f", *[rng.uniform(-0.1, 0.1) for _ in range(rows * cols)])


def rows_q8_0(rows, cols):
    out = b""
    for _ in range(rows * cols // 32):
        out += struct.pack("<e", 0.004) + bytes(rng.randrange(256) for _ in range(32))
    return out


# Bytes per block and elements per block of the quantized ggml types.
BLOCKS = {2: (18, 32), 3: (20, 32), 8: (34, 32), 12: (144, 256), 13: (176, 256), 14: (210, 256)}


def rows_of(ggml_type, rows, cols):
    """Random tensor bytes of any supported type (quant scales random too: NaNs welcome)."""
    if ggml_type == GGML_F32:
        return rows_f32(rows, cols)
    if ggml_type in (GGML_F16, GGML_BF16):
        return bytes(rng.randrange(256) for _ in range(2 * rows * cols))
    block_bytes, block_elems = BLOCKS[ggml_type]
    return bytes(rng.randrange(256) for _ in range(rows * cols // block_elems * block_bytes))


def mixed_types_gguf():
    """hidden 256 so that every block type fits a row: one matrix of each type."""
    hidden, inter, vocab = 256, 32, 16
    m = {"general.architecture": "llama", "llama.context_length": 64, "llama.embedding_length": hidden,
         "llama.block_count": 1, "llama.feed_forward_length": inter, "llama.attention.head_count": 2,
         "llama.attention.head_count_kv": 1, "llama.attention.key_length": 4,
         "llama.rope.freq_base": 10000.0}
    ones = lambda n: ([n], GGML_F32, struct.pack(f"<{n}f", *[1.0] * n))
    t = [("token_embd.weight", [vocab, hidden], GGML_BF16, rows_of(GGML_BF16, vocab, hidden)),
         ("output.weight", [vocab, hidden], 13, rows_of(13, vocab, hidden)),
         ("output_norm.weight", *ones(hidden)), ("blk.0.attn_norm.weight", *ones(hidden)),
         ("blk.0.ffn_norm.weight", *ones(hidden))]
    for name, rows, cols, ty in (("attn_q", 8, hidden, 14), ("attn_k", 4, hidden, 2), ("attn_v", 4, hidden, 3),
                                 ("attn_output", hidden, 8, GGML_F16), ("ffn_gate", inter, hidden, 12),
                                 ("ffn_up", inter, hidden, 12), ("ffn_down", hidden, inter, 2)):
        t.append((f"blk.0.{name}.weight", [rows, cols], ty, rows_of(ty, rows, cols)))
    return gguf(m, t)


def gguf(metadata, tensors):
    """tensors: list of (name, shape row-major, ggml type, bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, value in metadata.items():
        head += gguf_string(key) + gguf_value(value)
    data, infos = b"", b""
    for name, shape, ggml_type, blob in tensors:
        infos += gguf_string(name) + struct.pack("<I", len(shape))
        infos += b"".join(struct.pack("<Q", d) for d in reversed(shape))  # ne[0] is innermost
        infos += struct.pack("<IQ", ggml_type, len(data))
        data += blob + b"\0" * (-len(blob) % 32)
    head += infos
    head += b"\0" * (-len(head) % 32)
    return head + data


def llama_gguf(arch="llama", vocab=16, hidden=8, inter=16, layers=1, heads=2, kv_heads=1, head_dim=4,
               quant=False, bias=False, qk_norm=False, tied=True, extra=None, extra_tensors=()):
    m = {
        "general.architecture": arch,
        f"{arch}.context_length": 64,
        f"{arch}.embedding_length": hidden,
        f"{arch}.block_count": layers,
        f"{arch}.feed_forward_length": inter,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": kv_heads,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.freq_base": 10000.0,
    }
    m.update(extra or {})
    mat = (lambda r, c: (r, c, GGML_Q8_0, rows_q8_0(r, c))) if quant else (lambda r, c: (r, c, GGML_F32, rows_f32(r, c)))
    ones = lambda n: ([n], GGML_F32, struct.pack(f"<{n}f", *[1.0] * n))
    t = []
    def add_matrix(name, r, c):
        r, c, ty, blob = mat(r, c)
        t.append((name, [r, c], ty, blob))
    add_matrix("token_embd.weight", vocab, hidden)
    t.append(("output_norm.weight", *ones(hidden)))
    if not tied:
        add_matrix("output.weight", vocab, hidden)
    q, kv = heads * head_dim, kv_heads * head_dim
    for l in range(layers):
        p = f"blk.{l}."
        t.append((p + "attn_norm.weight", *ones(hidden)))
        add_matrix(p + "attn_q.weight", q, hidden)
        add_matrix(p + "attn_k.weight", kv, hidden)
        add_matrix(p + "attn_v.weight", kv, hidden)
        add_matrix(p + "attn_output.weight", hidden, q)
        if bias:
            for name, n in (("attn_q.bias", q), ("attn_k.bias", kv), ("attn_v.bias", kv)):
                t.append((p + name, [n], GGML_F32, rows_f32(1, n)))
        if qk_norm:
            t.append((p + "attn_q_norm.weight", *ones(head_dim)))
            t.append((p + "attn_k_norm.weight", *ones(head_dim)))
        t.append((p + "ffn_norm.weight", *ones(hidden)))
        add_matrix(p + "ffn_gate.weight", inter, hidden)
        add_matrix(p + "ffn_up.weight", inter, hidden)
        add_matrix(p + "ffn_down.weight", hidden, inter)
    t.extend(extra_tensors)
    return gguf(m, t)


def safetensors(tensors):
    """tensors: dict name -> (dtype, shape, bytes)."""
    header, data = {}, b""
    for name in sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def hf_dir(config, tensors):
    return b"S" + json.dumps(config, indent=1).encode() + b"\n--\n" + safetensors(tensors)


def hf_llama(vocab=16, hidden=8, inter=16, layers=1, heads=2, kv_heads=1, head_dim=4, mlx=False, rope=None):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
           "tie_word_embeddings": True}
    if rope:
        cfg["rope_scaling"] = rope
    t = {}
    def matrix(prefix, r, c):
        if mlx:  # 4-bit, group 32: u32 words of packed q, bf16 scales and biases
            words = bytes(rng.randrange(256) for _ in range(r * c // 2))
            t[prefix + ".weight"] = ("U32", [r, c // 8], words)
            t[prefix + ".scales"] = ("BF16", [r, c // 32], struct.pack("<H", 0x3c00) * (r * c // 32))
            t[prefix + ".biases"] = ("BF16", [r, c // 32], struct.pack("<H", 0xbc00) * (r * c // 32))
        else:
            t[prefix + ".weight"] = ("F32", [r, c], rows_f32(r, c))
    ones = lambda n: ("F32", [n], struct.pack(f"<{n}f", *[1.0] * n))
    matrix("model.embed_tokens", vocab, hidden)
    t["model.norm.weight"] = ones(hidden)
    q, kv = heads * head_dim, kv_heads * head_dim
    for l in range(layers):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ones(hidden)
        t[p + "post_attention_layernorm.weight"] = ones(hidden)
        matrix(p + "self_attn.q_proj", q, hidden)
        matrix(p + "self_attn.k_proj", kv, hidden)
        matrix(p + "self_attn.v_proj", kv, hidden)
        matrix(p + "self_attn.o_proj", hidden, q)
        matrix(p + "mlp.gate_proj", inter, hidden)
        matrix(p + "mlp.up_proj", inter, hidden)
        matrix(p + "mlp.down_proj", hidden, inter)
    if mlx:
        cfg["quantization"] = {"bits": 4, "group_size": 32}
    return hf_dir(cfg, t)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "llama_f32.bin": b"G" + llama_gguf(),
        "llama_untied_2layers.bin": b"G" + llama_gguf(layers=2, tied=False),
        "llama_q8_0.bin": b"G" + llama_gguf(hidden=32, inter=32, heads=4, kv_heads=2, head_dim=8, quant=True),
        "qwen2_bias.bin": b"G" + llama_gguf(arch="qwen2", bias=True),
        "qwen3_qk_norm.bin": b"G" + llama_gguf(arch="qwen3", head_dim=6, qk_norm=True),
        "llama_rope_freqs_linear.bin": b"G" + llama_gguf(
            extra={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0},
            extra_tensors=[("rope_freqs.weight", [2], GGML_F32, struct.pack("<2f", 1.0, 4.0))]),
        "llama_tokenizer.bin": b"G" + llama_gguf(extra={
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": [f"t{i}" for i in range(16)],
            "tokenizer.ggml.merges": []}),
        "llama_mixed_types.bin": b"G" + mixed_types_gguf(),
        "hf_llama.bin": hf_llama(),
        "hf_llama3_rope.bin": hf_llama(layers=2, rope={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 16}),
        "hf_mlx_4bit.bin": hf_llama(hidden=32, inter=32, heads=4, kv_heads=2, head_dim=8, mlx=True),
    }
    for name, data in seeds.items():
        assert len(data) <= 65536, (name, len(data))  # scripts/fuzz.sh runs with -max_len=65536
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
