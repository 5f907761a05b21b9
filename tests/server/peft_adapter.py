"""Random PEFT LoRA adapters for the e2e tests: adapter_config.json plus
adapter_model.safetensors written with numpy alone (the safetensors layout:
an 8-byte little-endian header length, a JSON header, raw little-endian data).

Factors are f32 values that f16 represents exactly: the server stores
unmerged factors in f16, `--adapter` merges the f32 ones, and with these
(and a power-of-two scale) both hold the same adapter."""
import json
import os
import struct

import numpy as np

# SmolLM2-135M-Instruct: hidden 576, intermediate 1536, 9 heads / 3 kv heads of 64, 30 layers.
SMOLLM2 = {"layers": 30, "hidden": 576, "inter": 1536, "q": 576, "kv": 192}
MODULES = {  # name: (parent, in, out) for the SmolLM2 shapes
    "q_proj": ("self_attn", "hidden", "q"), "k_proj": ("self_attn", "hidden", "kv"),
    "v_proj": ("self_attn", "hidden", "kv"), "o_proj": ("self_attn", "q", "hidden"),
    "gate_proj": ("mlp", "hidden", "inter"), "up_proj": ("mlp", "hidden", "inter"),
    "down_proj": ("mlp", "inter", "hidden"),
}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def random_factors(seed, rank=8, targets=tuple(MODULES), b_std=0.05, shapes=SMOLLM2):
    """{(layer, module): (A [r, in], B [out, r])}, f32 values on f16's grid."""
    rng = np.random.default_rng(seed)
    factors = {}
    for layer in range(shapes["layers"]):
        for module in targets:
            _, fan_in, fan_out = MODULES[module]
            bound = 1.0 / np.sqrt(shapes[fan_in])
            a = rng.uniform(-bound, bound, (rank, shapes[fan_in]))
            b = rng.normal(0.0, b_std, (shapes[fan_out], rank))
            factors[layer, module] = (a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32))
    return factors


def write_adapter(directory, seed, rank=8, alpha=16, targets=tuple(MODULES), b_std=0.05, shapes=SMOLLM2,
                  rslora=False, drop=None, config_extra=None):
    """A random adapter; `drop` names one tensor to leave out (a broken adapter)."""
    os.makedirs(directory, exist_ok=True)
    tensors = {}
    for (layer, module), (a, b) in random_factors(seed, rank, targets, b_std, shapes).items():
        prefix = f"base_model.model.model.layers.{layer}.{MODULES[module][0]}.{module}"
        tensors[prefix + ".lora_A.weight"] = a
        tensors[prefix + ".lora_B.weight"] = b
    if drop:
        del tensors[drop]
    write_safetensors(os.path.join(directory, "adapter_model.safetensors"), tensors)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "use_rslora": rslora,
              "target_modules": list(targets), "bias": "none", **(config_extra or {})}
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    return directory


GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def interleave_rope_rows(b, n_heads):
    """llama.cpp's converter permutation of q/k rows for a "llama" GGUF:
    within each head, the two rotary halves interleaved."""
    return b.reshape(n_heads, 2, b.shape[0] // n_heads // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


def write_gguf_adapter(path, seed, rank=8, alpha=16, targets=tuple(MODULES), b_std=0.05, shapes=SMOLLM2,
                       heads=9, kv_heads=3, dtype=np.float32):
    """The factors write_adapter(seed, ...) writes, as llama.cpp's GGUF LoRA
    for a "llama" base (written with llama.cpp's own `gguf` package)."""
    import gguf
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_string(gguf.Keys.General.TYPE, "adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
    for (layer, module), (a, b) in random_factors(seed, rank, targets, b_std, shapes).items():
        if module in ("q_proj", "k_proj"):
            b = interleave_rope_rows(b, heads if module == "q_proj" else kv_heads)
        name = f"blk.{layer}.{GGUF_NAMES[module]}.weight"
        writer.add_tensor(name + ".lora_a", np.ascontiguousarray(a, dtype=dtype))
        writer.add_tensor(name + ".lora_b", np.ascontiguousarray(b, dtype=dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
