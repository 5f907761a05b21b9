#!/usr/bin/env python3
"""Goldens for the GGUF reader, produced with the python `gguf` package.

1. tests/formats/golden/smollm2_gguf.json: every metadata key of the default
   model (scalars by value; arrays by element type, count, first/last elements
   and an FNV-1a 64 hash) and every tensor (name, ggml type, row-major shape,
   absolute offset, byte size, first 16 bytes).
2. tests/formats/fixtures/all_types.gguf: a small file written by
   gguf.GGUFWriter with every metadata type, a nested array, general.alignment
   64 and F32/F16/BF16/Q8_0 tensors; its expected contents are in
   tests/formats/golden/all_types_gguf.json.

Run: python3 tools/oracle/formats_gguf_golden.py
"""
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")
VERSION = getattr(gguf, "__version__", None)
if VERSION is None:
    from importlib.metadata import version as _v
    VERSION = _v("gguf")

FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv1a(data: bytes, h: int = FNV_OFFSET) -> int:
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def hash_strings(items) -> str:
    """FNV-1a 64 over (u64 length, bytes) of each string, as brioche's test does."""
    h = FNV_OFFSET
    for s in items:
        h = fnv1a(struct.pack("<Q", len(s)) + s, h)
    return f"{h:016x}"


def hash_ints(items) -> str:
    """FNV-1a 64 over each value as little-endian i64."""
    h = FNV_OFFSET
    for v in items:
        h = fnv1a(struct.pack("<q", int(v)), h)
    return f"{h:016x}"


TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def field_entry(field):
    t = field.types[0]
    if t == GGUFValueType.STRING:
        return {"type": "string", "value": bytes(field.parts[field.data[0]]).decode("utf-8")}
    if t != GGUFValueType.ARRAY:
        v = field.parts[field.data[0]][0]
        if t == GGUFValueType.BOOL:
            v = bool(v)
        elif t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
            v = float(v)
        else:
            v = int(v)
        return {"type": TYPE_NAMES[t], "value": v}
    elem = field.types[1]
    entry = {"type": "array", "element_type": TYPE_NAMES[elem], "count": len(field.data)}
    if elem == GGUFValueType.STRING:
        items = [bytes(field.parts[i]) for i in field.data]
        entry["first"] = [s.decode("utf-8") for s in items[:4]]
        entry["last"] = items[-1].decode("utf-8") if items else None
        entry["fnv1a"] = hash_strings(items)
    elif elem in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        entry["first"] = [float(field.parts[i][0]) for i in field.data[:4]]
    else:
        items = [int(field.parts[i][0]) for i in field.data]
        entry["first"] = items[:4]
        entry["fnv1a"] = hash_ints(items)
    return entry


def describe(path):
    r = GGUFReader(path)
    out = {
        "tool": f"python gguf {VERSION} (GGUFReader)",
        "file": os.path.basename(path),
        "file_size": os.path.getsize(path),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "metadata": {},
        "tensors": [],
    }
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            if key == "GGUF.version":
                out["version"] = int(field.parts[field.data[0]][0])
            continue
        out["metadata"][key] = field_entry(field)
    for t in r.tensors:
        raw = np.asarray(t.data).tobytes()
        out["tensors"].append({
            "name": t.name,
            "ggml_type": int(t.tensor_type),
            "shape": [int(x) for x in reversed(t.shape)],
            "offset": int(t.data_offset),
            "nbytes": int(t.n_bytes),
            "head": raw[:16].hex(),
        })
    return out


def write_all_types(path):
    w = GGUFWriter(path, "llama")  # adds general.architecture first
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", 2.718281828459045)
    w.add_bool("t.bool", True)
    w.add_string("t.string", "héllo ✓")
    w.add_array("t.strings", ["a", "", "ccc"])
    w.add_array("t.ints", [1, -2, 3])           # i32 elements (the writer picks INT32)
    w.add_array("t.floats", [0.5, -1.25])        # f32 elements
    w.add_array("t.nested", [[1, 2], [3]])  # array of arrays
    w.add_custom_alignment(64)  # sets the writer's data alignment and general.alignment
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal((2, 8)).astype(np.float16)
    bf16_src = rng.standard_normal((4, 4)).astype(np.float32)
    q8_src = rng.standard_normal((2, 64)).astype(np.float32)
    w.add_tensor("a.f32", f32)
    w.add_tensor("b.f16", f16)
    bf16 = gguf.quants.quantize(bf16_src, GGMLQuantizationType.BF16)
    w.add_tensor("c.bf16", bf16, raw_shape=bf16.shape, raw_dtype=GGMLQuantizationType.BF16)
    q8 = gguf.quants.quantize(q8_src, GGMLQuantizationType.Q8_0)
    w.add_tensor("d.q8_0", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = describe(path)
    # GGUFReader flattens arrays of arrays; record what was written instead.
    out["metadata"]["t.nested"] = {"type": "array", "element_type": "array", "count": 2,
                                   "nested": [[1, 2], [3]]}
    out["values"] = {
        "a.f32": [float(x) for x in f32.ravel()],
        "b.f16": [float(x) for x in f16.astype(np.float32).ravel()],
        "c.bf16": [float(x) for x in gguf.quants.dequantize(bf16, GGMLQuantizationType.BF16).ravel()],
        "d.q8_0": [float(x) for x in gguf.quants.dequantize(q8, GGMLQuantizationType.Q8_0).ravel()],
    }
    return out


def main():
    gold = os.path.join(ROOT, "tests/formats/golden")
    fixtures = os.path.join(ROOT, "tests/formats/fixtures")
    os.makedirs(gold, exist_ok=True)
    os.makedirs(fixtures, exist_ok=True)
    if os.path.exists(MODEL):
        with open(os.path.join(gold, "smollm2_gguf.json"), "w") as f:
            json.dump(describe(MODEL), f, indent=1, ensure_ascii=False)
    else:
        print(f"skipping the default-model golden: {MODEL} not found", file=sys.stderr)
    info = write_all_types(os.path.join(fixtures, "all_types.gguf"))
    with open(os.path.join(gold, "all_types_gguf.json"), "w") as f:
        json.dump(info, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
