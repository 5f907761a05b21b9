#!/usr/bin/env python3
"""Builds the tokenizer test corpus and the Hugging Face `tokenizers` goldens.

Outputs (zstd-compressed, under tests/tokenizer/golden/):
  corpus.bin.zst          the corpus: documents generated from a fixed seed
  <name>.ids.bin.zst      for each tokenizer: HF token ids of every document
                          (add_special_tokens=False) and HF's decode of them

Binary layout (little-endian), after zstd decompression:
  corpus:  "BRIOCHE-TOKCORPUS 1\\n" <json metadata line>\\n u32 n_docs,
           n_docs x (u32 n_bytes, bytes)
  golden:  "BRIOCHE-TOKGOLD 1\\n" <json metadata line>\\n u32 n_docs,
           n_docs x (u32 n_ids, i32 ids[n_ids], u32 n_decoded, bytes)
           where n_decoded = 0xFFFFFFFF means "decode(ids) == the document".
The metadata line records the tool and version that produced the file.

Tokenizers: the four fixtures tests/fixtures/tokenizers/{llama2,llama3,qwen3,gemma3}
and SmolLM2 built from its GGUF (vocab, merges, token types; pre-tokenizer of
tokenizer.ggml.pre = "smollm": Digits(individual) + ByteLevel regex).

Usage: python3 tools/oracle/tokenizer_goldens.py [--gguf PATH]
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers import AddedToken

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "tokenizer", "golden")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
SEED = 20240611
TARGET_BYTES = 1_100_000


def zstd_read(path):
    return subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout


def zstd_write(path, data):
    subprocess.run(["zstd", "-19", "-q", "-f", "-o", path], input=data, check=True)


# ---------------------------------------------------------------- corpus

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one you "
         "were all we when there can been has more if no out do so what up said about other into than its time only "
         "could new them man some these then two first may any like now my such make over our even most me state "
         "after also made many did must before back see through way where get much go well your know should down work "
         "year because come people just say each those take day good how long Mr own too little use US very great "
         "still men here life both between old under last never place same another think house while high right might "
         "came off find states since used give against three himself look few general hand school part small American "
         "home during number again Mrs around thought went without however Govt don't world though less political "
         "tokenizer byte-level merges vocabulary streaming detokenizer naïve café résumé coöperate façade Zürich "
         "jalapeño Ångström ÉCOLE Straße").split()
CONTRACTIONS = ["it's", "don't", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "Don'T", "She'S", "O'Neil"]
PUNCT = [".", ",", ";", ":", "!", "?", "...", " -", " —", "(", ")", "\"", "'", "«", "»", "“", "”", "…"]

CJK_COMMON = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴落"
JAPANESE = "こんにちは世界。今日はいい天気ですね。カタカナのテキストとひらがなを混ぜます。東京タワーに行きました！ラーメンを食べたい。"
KOREAN_WORDS = ["안녕하세요", "세계", "토크나이저", "한국어", "텍스트", "감사합니다", "서울", "프로그래밍"]
ARABIC_WORDS = ["مرحبا", "بالعالم", "اللغة", "العربية", "كتاب", "مدرسة", "الحاسوب", "شكرا", "السلام", "عليكم"]
HINDI_WORDS = ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "किताब", "विद्यालय", "धन्यवाद", "कंप्यूटर", "प्रोग्रामिंग"]
GREEK_CYRILLIC = ["Καλημέρα", "κόσμε", "Ελληνικά", "Привет", "мир", "Русский", "язык", "Ёлка", "Україна", "Беларусь"]
EMOJI = ["😀", "😂", "🥲", "🤖", "🎉", "🔥", "❤️", "✨", "👍", "🚀", "🍕", "🐍", "🌍", "💡", "⚡", "☕", "🙏", "👀", "💯",
         "🧠", "🦀", "🐧", "🎵", "🌸", "✅", "❌", "⭐", "☀️", "🌧️", "🏳️‍🌈"]
ZWJ = ["👨‍👩‍👧‍👦", "👩‍💻", "🧑‍🚀", "👨‍🍳", "🏃‍♀️", "🤷‍♂️", "👁️‍🗨️", "🐻‍❄️", "❤️‍🔥", "🧑🏽‍🤝‍🧑🏻"]
SKIN_TONES = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
TONE_BASES = ["👍", "👋", "🙌", "👏", "✌", "🤞", "💪", "🧑", "👶", "🙋"]
FLAGS = ["🇫🇷", "🇯🇵", "🇺🇸", "🇩🇪", "🇧🇷", "🇮🇳", "🇰🇷", "🇪🇸"]
KEYCAPS = ["1️⃣", "2️⃣", "#️⃣", "*️⃣"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030A", "\u0323", "\u0327", "\u0328", "\u031B",
             "\u0345", "\u0307", "\u0331", "\u0306", "\u030C", "\u0336", "\u20DD"]
SPECIAL_STRINGS = ["<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<pad>",
                   "<start_of_turn>", "<end_of_turn>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                   "</tool_call>", "<|fim_prefix|>", "<|reserved_special_token_5|>", "<mask>", "<unused17>",
                   "<table>", "</td>", "<|im_st", "<|im_end", "< s>", "<<s>>", "<|eot_id|><|eot_id|>", "▁▁", "▁▁▁▁▁",
                   "<0x41>", "<|repo_name|>"]
PY_IDENTS = ["data", "result", "tokenizer", "merge_rank", "vocab", "config", "buffer", "self", "item", "value", "i",
             "n_tokens", "hidden_states", "kv_cache", "scores", "__init__", "MAX_LEN", "parse_json"]


def gen_english(rng):
    out = []
    for _ in range(rng.randint(3, 12)):
        n = rng.randint(4, 25)
        words = []
        for i in range(n):
            r = rng.random()
            if r < 0.06:
                words.append(rng.choice(CONTRACTIONS))
            elif r < 0.10:
                words.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
            else:
                w = rng.choice(WORDS)
                words.append(w.capitalize() if i == 0 or rng.random() < 0.05 else (w.upper() if rng.random() < 0.02 else w))
            if rng.random() < 0.08:
                words[-1] += rng.choice(PUNCT)
        out.append(" ".join(words) + rng.choice([".", ".", "!", "?", "...", ":"]))
    sep = rng.choice([" ", " ", "  ", "\n", "\n\n"])
    return sep.join(out)


def gen_python(rng):
    a, b, c = rng.sample(PY_IDENTS, 3)
    indent = rng.choice(["    ", "  ", "\t"])
    lines = [f"def {a}_{rng.randint(0, 99)}({b}, {c}=None):",
             f'{indent}"""Compute the {a} of {b} (see #{rng.randint(1, 9999)})."""',
             f"{indent}if {c} is None:",
             f"{indent}{indent}{c} = {{'{b}': [{', '.join(str(rng.randint(-999, 99999)) for _ in range(rng.randint(1, 6)))}]}}",
             f"{indent}for i, x in enumerate({b}):",
             f"{indent}{indent}{c}[i] = x ** 2 + {rng.random():.6f}  # squared",
             f"{indent}{indent}print(f\"{{i:>4}}: {{x!r}} -> {{{c}[i]}}\")",
             f"{indent}return {c}",
             ""]
    if rng.random() < 0.5:
        lines += ["class Foo(Bar):", f"{indent}x: int = 0x{rng.randint(0, 2**32):08X}",
                  f"{indent}def __repr__(self) -> str:", f"{indent}{indent}return f'<Foo {{self.x}}>'", ""]
    return "\n".join(lines)


def gen_cpp(rng):
    a, b = rng.sample(PY_IDENTS, 2)
    n = rng.randint(1, 4096)
    return (f"#include <vector>\n#include <cstdint>\n\n// {a}: sums {b} over [0, {n})\n"
            f"template <typename T>\nstatic inline T {a.strip('_')}_sum(const std::vector<T>& {b}) {{\n"
            f"  T acc{{}};\n  for (size_t i = 0; i < {b}.size() && i < {n}u; ++i) {{\n"
            f"    acc += {b}[i] * static_cast<T>({rng.randint(2, 9)});\t// scale\n  }}\n"
            f"  return acc;  /* {rng.choice(WORDS)} */\n}}\n\nint main(int argc, char** argv) {{\n"
            f"  std::vector<int64_t> v{{{', '.join(str(rng.randint(-50, 50)) for _ in range(rng.randint(2, 8)))}}};\n"
            f"  return {a.strip('_')}_sum(v) != {rng.randint(0, 100)} ? 1 : 0;\n}}\n")


def gen_cjk(rng):
    parts = []
    for _ in range(rng.randint(2, 6)):
        r = rng.random()
        if r < 0.5:
            parts.append("".join(rng.choice(CJK_COMMON) for _ in range(rng.randint(5, 40))) + rng.choice(["。", "，", "！", "？", "、", ""]))
        elif r < 0.75:
            start = rng.randint(0, len(JAPANESE) - 10)
            parts.append(JAPANESE[start:start + rng.randint(5, 30)])
        else:
            parts.append(" ".join(rng.choice(KOREAN_WORDS) for _ in range(rng.randint(2, 6))))
    return rng.choice(["", " ", "\n"]).join(parts)


def gen_emoji(rng):
    parts = []
    for _ in range(rng.randint(3, 20)):
        r = rng.random()
        if r < 0.35:
            parts.append(rng.choice(EMOJI))
        elif r < 0.55:
            parts.append(rng.choice(ZWJ))
        elif r < 0.75:
            parts.append(rng.choice(TONE_BASES) + rng.choice(SKIN_TONES))
        elif r < 0.85:
            parts.append(rng.choice(FLAGS))
        elif r < 0.9:
            parts.append(rng.choice(KEYCAPS))
        else:
            parts.append(rng.choice(WORDS))
    return "".join(p + rng.choice(["", "", " ", "  "]) for p in parts)


def gen_combining(rng):
    parts = []
    for _ in range(rng.randint(3, 12)):
        r = rng.random()
        if r < 0.4:  # base letters with 1..4 marks in random (often non-canonical) order
            w = "".join(rng.choice("aeiouAEOnscyzgh") + "".join(rng.sample(COMBINING, rng.randint(1, 4)))
                        for _ in range(rng.randint(1, 6)))
            parts.append(w)
        elif r < 0.6:  # decomposed Hangul jamo sequences (compose under NFC)
            parts.append("".join(chr(0x1100 + rng.randint(0, 18)) + chr(0x1161 + rng.randint(0, 20)) +
                                 (chr(0x11A8 + rng.randint(0, 26)) if rng.random() < 0.5 else "")
                                 for _ in range(rng.randint(1, 4))))
        elif r < 0.8:
            parts.append(" ".join(rng.choice(ARABIC_WORDS + HINDI_WORDS) for _ in range(rng.randint(2, 6))))
        else:
            parts.append(" ".join(rng.choice(GREEK_CYRILLIC) for _ in range(rng.randint(1, 4))))
    return " ".join(parts)


def gen_whitespace(rng):
    parts = []
    for _ in range(rng.randint(3, 10)):
        ws = rng.choice([" " * rng.randint(2, 80), "\t" * rng.randint(1, 12), "\n" * rng.randint(1, 40),
                         "\r\n" * rng.randint(1, 6), " \n \n\t ", "\u00a0\u00a0", "\u3000", "\u2003 ",
                         " " * rng.randint(1, 5) + "\n" * rng.randint(1, 5) + " " * rng.randint(1, 9)])
        parts.append(ws)
        parts.append(rng.choice(WORDS + ["", "x", "{", "}", "-", "*"]))
    return "".join(parts)


def gen_digits(rng):
    parts = []
    for _ in range(rng.randint(3, 10)):
        r = rng.random()
        if r < 0.3:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(5, 120))))
        elif r < 0.5:
            parts.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}")
        elif r < 0.6:
            parts.append(f"+1 ({rng.randint(100, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)}")
        elif r < 0.7:
            parts.append("٠١٢٣٤٥٦٧٨٩"[rng.randint(0, 5):] + " ²³ ½ Ⅻ")
        else:
            parts.append(f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
                         f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z")
    return rng.choice([" ", ", ", "\n", ""]).join(parts)


def gen_special(rng):
    parts = []
    for _ in range(rng.randint(3, 12)):
        if rng.random() < 0.5:
            parts.append(rng.choice(SPECIAL_STRINGS))
        else:
            parts.append(rng.choice(["user\n", "assistant\n", "system\nYou are helpful.", " Hello", "\n",
                                     rng.choice(WORDS), " " + rng.choice(WORDS)]))
    return "".join(parts)


GENERATORS = [(gen_english, 30), (gen_python, 10), (gen_cpp, 8), (gen_cjk, 10), (gen_emoji, 8),
              (gen_combining, 10), (gen_whitespace, 8), (gen_digits, 8), (gen_special, 8)]


def build_corpus():
    rng = random.Random(SEED)
    funcs = [f for f, _ in GENERATORS]
    weights = [w for _, w in GENERATORS]
    docs, total = [], 0
    while total < TARGET_BYTES:
        # Mostly one category per document, sometimes a mix of several.
        n = 1 if rng.random() < 0.6 else rng.randint(2, 4)
        doc = rng.choice(["", "", " ", "\n"]).join(rng.choices(funcs, weights)[0](rng) for _ in range(n))
        docs.append(doc)
        total += len(doc.encode("utf-8"))
    docs.append("")   # empty input
    docs.append(" ")  # a single space
    return docs


# ---------------------------------------------------------------- tokenizers

def smollm2_from_gguf(path):
    """SmolLM2's tokenizer from the GGUF: byte-level BPE + the smollm pre-tokenizer."""
    import gguf
    reader = gguf.GGUFReader(path)

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = reader.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    types = ints("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    pre = bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=(ty == 3), normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_tokens(added)
    return tok


def write_corpus(docs):
    meta = {"seed": SEED, "generator": "tools/oracle/tokenizer_goldens.py", "n_docs": len(docs)}
    out = bytearray(b"BRIOCHE-TOKCORPUS 1\n" + json.dumps(meta).encode() + b"\n")
    out += struct.pack("<I", len(docs))
    for d in docs:
        b = d.encode("utf-8")
        out += struct.pack("<I", len(b)) + b
    zstd_write(os.path.join(GOLDEN, "corpus.bin.zst"), bytes(out))
    return len(out)


def write_golden(name, tok, docs, source):
    meta = {"tool": "tokenizers", "version": tokenizers.__version__, "tokenizer": name, "source": source,
            "add_special_tokens": False, "corpus_seed": SEED}
    out = bytearray(b"BRIOCHE-TOKGOLD 1\n" + json.dumps(meta).encode() + b"\n")
    out += struct.pack("<I", len(docs))
    n_tokens = n_diff = 0
    for d in docs:
        ids = tok.encode(d, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        out += struct.pack("<I", len(ids)) + struct.pack(f"<{len(ids)}i", *ids)
        if decoded == d:
            out += struct.pack("<I", 0xFFFFFFFF)
        else:
            b = decoded.encode("utf-8")
            out += struct.pack("<I", len(b)) + b
            n_diff += 1
        n_tokens += len(ids)
    path = os.path.join(GOLDEN, f"{name}.ids.bin.zst")
    zstd_write(path, bytes(out))
    print(f"{name}: {n_tokens} tokens, {n_diff} docs where decode(encode(x)) != x, "
          f"{os.path.getsize(path)} bytes compressed")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", default=os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    os.makedirs(GOLDEN, exist_ok=True)
    docs = build_corpus()
    size = write_corpus(docs)
    print(f"corpus: {len(docs)} docs, {sum(len(d.encode()) for d in docs)} bytes of text ({size} raw file bytes)")
    tokenizers.Tokenizer  # noqa
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    for name in ["llama2", "llama3", "qwen3", "gemma3"]:
        tok = Tokenizer.from_str(zstd_read(os.path.join(FIXTURES, name, "tokenizer.json.zst")).decode("utf-8"))
        write_golden(name, tok, docs, f"tests/fixtures/tokenizers/{name}/tokenizer.json.zst")
    write_golden("smollm2", smollm2_from_gguf(args.gguf), docs, "SmolLM2-135M-Instruct.Q4_1.gguf (tokenizer.ggml.*)")


if __name__ == "__main__":
    sys.exit(main())
