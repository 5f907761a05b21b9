"""Token bytes of a tokenizer.json, decoded the way brioche's grammar tests do.

Byte-level BPE (Llama-3, Qwen): GPT-2's byte<->unicode table. SentencePiece
style (Llama-2, Gemma): "▁" is a space and "<0xXX>" is a raw byte. Special
added tokens decode to b"" (the grammar engine never emits them).
"""
import json
import subprocess


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def load_vocab(path):
    raw = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
    d = json.loads(raw)
    vocab = d["model"]["vocab"]
    if isinstance(vocab, list):  # unigram: [piece, score]
        vocab = {p[0]: i for i, p in enumerate(vocab)}
    n = max(list(vocab.values()) + [t["id"] for t in d["added_tokens"]]) + 1
    toks = [b""] * n
    byte_level = (d.get("decoder") or {}).get("type") == "ByteLevel"
    u2b = _bytes_to_unicode()
    for s, i in vocab.items():
        if byte_level:
            toks[i] = bytes(u2b[c] for c in s)
        elif len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            toks[i] = bytes([int(s[3:5], 16)])
        else:
            toks[i] = s.replace("\u2581", " ").encode()
    special = []
    for t in d["added_tokens"]:
        if t["special"]:
            toks[t["id"]] = b""
            special.append(t["id"])
        else:
            toks[t["id"]] = t["content"].encode()
    return toks, special


EOS = {"llama3": [128001, 128009], "qwen3": [151643, 151645]}
