#!/usr/bin/env python3
"""Gemma 4 GGUF LoRA fixtures written by llama.cpp's own converter.

llama.cpp's convert_lora_to_gguf.py (from the llama-cpp-python sdist, which
vendors llama.cpp: `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36`, unpack, pass vendor/llama.cpp; it writes with
llama.cpp's own gguf-py) converts the peft adapters of the oracle
(tests/fixtures/gemma4/lora/{mix,e2b,moe}, tools/oracle/gemma4_lora_oracle.py)
against their bases to f32 GGUF LoRA files:

  tests/fixtures/gemma4/gguf/lora-{mix,e2b,moe}.f32.gguf

The converter's conventions, which brioche's reader
(src/train/adapter_gguf.cpp) follows: general.type "adapter", adapter.type
"lora", adapter.lora.alpha = peft's lora_alpha (f32; use_rslora is not
carried, the fixtures have none), general.architecture "gemma4"; peft's
base_model.model.model[.language_model].layers.N.<self_attn|mlp>.<q|k|v|o|
gate|up|down>_proj.lora_A/B.weight become blk.N.<attn_q|attn_k|attn_v|
attn_output|ffn_gate|ffn_up|ffn_down>.weight.lora_a/.lora_b, each factor
as peft holds it (A [r, in], B [out, r] row-major, i.e. ggml ne [in, r] and
[r, out]; Gemma 4's converter renames only, no row permutation). f32 keeps
the factors exact, so the peft adapter's goldens (logits.f32) are the
oracle for these files on the GGUF bases (tests/fixtures/gemma4/gguf,
tools/oracle/gemma4_gguf_fixtures.py).

Usage: python3 tools/oracle/gemma4_gguf_lora_fixtures.py <llama.cpp source dir>
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    llama = os.path.abspath(sys.argv[1])
    fixtures = os.path.join(ROOT, "tests", "fixtures", "gemma4")
    for name in ("mix", "e2b", "moe"):
        out = os.path.join(fixtures, "gguf", f"lora-{name}.f32.gguf")
        subprocess.run([sys.executable, os.path.join(llama, "convert_lora_to_gguf.py"),
                        "--base", os.path.join(fixtures, name), "--outtype", "f32", "--outfile", out,
                        os.path.join(fixtures, "lora", name)], check=True)
        check(out, os.path.join(fixtures, "lora", name))


def check(gguf_path, peft_dir):
    """Every peft factor is in the GGUF, unchanged, under llama.cpp's name."""
    import json
    import numpy as np
    from safetensors.numpy import load_file
    sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[1]), "gguf-py"))
    import gguf
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    reader = gguf.GGUFReader(gguf_path)
    tensors = {t.name: np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    peft = load_file(os.path.join(peft_dir, "adapter_model.safetensors"))
    with open(os.path.join(peft_dir, "adapter_config.json")) as f:
        alpha = json.load(f)["lora_alpha"]
    assert float(reader.fields["adapter.lora.alpha"].contents()) == float(alpha)
    assert len(tensors) == len(peft), (len(tensors), len(peft))
    for key, value in peft.items():
        parts = key.split(".")
        layer = int(parts[parts.index("layers") + 1])
        module, ab = parts[-3], parts[-2]
        name = f"blk.{layer}.{names[module]}.weight.{'lora_a' if ab == 'lora_A' else 'lora_b'}"
        assert np.array_equal(tensors[name], value), name
    print(f"{gguf_path}: {len(tensors)} tensors equal to peft's, alpha {alpha}")


if __name__ == "__main__":
    main()
