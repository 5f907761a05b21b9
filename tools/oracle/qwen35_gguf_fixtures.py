#!/usr/bin/env python3
"""Qwen 3.5 GGUF fixtures written by llama.cpp's own converter.

llama.cpp's convert_hf_to_gguf.py (from the llama-cpp-python sdist, which
vendors llama.cpp: `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36`, unpack, pass vendor/llama.cpp) converts the
random-weight transformers fixtures tests/fixtures/qwen35/{dense,moe} to
f32 GGUF (--no-mtp: the fixtures have no MTP head):

  tests/fixtures/qwen35/gguf/{dense,moe}.f32.gguf

f32 is lossless, so the fixtures' own goldens (transformers' logits,
tools/oracle/qwen35_oracle.py) are the oracle for these files too.
The dense model is also converted to Q8_0 (dense.q8_0.gguf: what users
have is quantized, and brioche moves quantized rows and columns to undo
the converter's reordering), and gguf-py dequantizes that file into
dense.q8_0-dequantized.f32.gguf (same metadata, every tensor f32): brioche
must read the two alike. The
converter reorders the linear-attention value heads, writes -exp(A_log),
adds 1 to the zero-centred norms and renames every tensor; brioche undoes
that (model/load_qwen35_gguf.cpp).

The fixture tokenizers' pre-tokenizer (ByteLevel with GPT-2's regex) has no
entry in the converter's hash table: the converter is told "gpt2" (the
pre-tokenizer it is), everything else runs as shipped.

Usage: python3 tools/oracle/qwen35_gguf_fixtures.py <llama.cpp source dir>
"""
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    llama = os.path.abspath(sys.argv[1])
    sys.path[:0] = [llama, os.path.join(llama, "gguf-py")]
    import conversion.base as base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt2"
    out = os.path.join(ROOT, "tests", "fixtures", "qwen35", "gguf")
    os.makedirs(out, exist_ok=True)
    for name in ("dense", "moe"):
        sys.argv = [os.path.join(llama, "convert_hf_to_gguf.py"), os.path.join(ROOT, "tests", "fixtures", "qwen35", name),
                    "--no-mtp", "--outtype", "f32", "--outfile", os.path.join(out, f"{name}.f32.gguf")]
        convert(sys.argv)
    convert([os.path.join(llama, "convert_hf_to_gguf.py"), os.path.join(ROOT, "tests", "fixtures", "qwen35", "dense"),
             "--no-mtp", "--outtype", "q8_0",
             "--outfile", os.path.join(out, "dense.q8_0.gguf")])
    dequantized_copy(os.path.join(out, "dense.q8_0.gguf"), os.path.join(out, "dense.q8_0-dequantized.f32.gguf"))


def convert(argv):
    sys.argv = argv
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code:
            raise


def dequantized_copy(src, dst):
    """Every tensor of `src` dequantized to f32 by gguf-py, metadata as is."""
    import gguf
    import numpy as np
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data.reshape([int(x) for x in reversed(t.shape)]), raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
