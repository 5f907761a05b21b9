#!/usr/bin/env python3
"""Goldens for Unicode general categories in JSON-schema patterns (\\p{L},
\\p{Z}, \\p{N}, \\P{M}, ...; src/grammar/unicode_categories.cpp): for each
schema, candidate strings and whether they match.

jsonschema judges `pattern` with Python's `re`, which has no \\p{...} (it
raises), so the verdict here is the `regex` module's search (an independent
implementation of the Unicode properties, like ECMA-262's with the u flag)
plus the length bounds, counted in code points as JSON Schema counts them.
Candidates whose category differs between the `regex` module's Unicode
version and unicodedata's (the table's source) are left out.

  python3 tools/oracle/grammar_unicode_category_goldens.py   # writes tests/grammar/golden/unicode_categories.json.zst
"""
import importlib.metadata
import json
import os
import subprocess
import unicodedata

import regex

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "unicode_categories.json.zst")

# One character of many categories and scripts: Latin, Greek, Cyrillic, CJK,
# Arabic, Devanagari (letters and marks), digits of several scripts, Roman
# numerals (Nl), fractions (No), spaces (Zs), the line and paragraph
# separators, punctuation, symbols, emoji (So, astral), combining marks,
# control and format characters, private use, an unassigned code point.
SAMPLE = ("aZé\u00b5\u01c5\u02b0\u05d0\u0627\u0915\u093f\u0301\u20dd\u0903ΩжЖ中ー\U00020000"
          "09\u0660\u0966\u2164\u00bd\u00b2 \u00a0\u3000\u2028\u2029_.:/=+-@%,!?()[]{}*&#'"
          "$\u20ac\u00a9\u2211\u02c6\U0001F600\u2603\u00ad\u200b\ue000\U000F0000\u0378~`^|<>")

CASES = [
    # CloudFormation's tag keys and values.
    ("tag_key", {"type": "string", "pattern": "^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)$", "minLength": 1, "maxLength": 4}),
    ("tag_value", {"type": "string", "pattern": "^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)$", "maxLength": 3}),
    # The same class behind a lookahead (one counted expression, regex_dfa.h's class budget).
    ("tag_key_not_aws", {"type": "string", "pattern": "^(?!aws:.*)([\\p{L}\\p{Z}\\p{N}_.:=+\\/\\-@%]*)$",
                         "minLength": 1, "maxLength": 6}),
    ("letters_search", {"type": "string", "pattern": "\\p{L}"}),
    ("not_mark", {"type": "string", "pattern": "^[\\P{M}]{0,3}$"}),
    ("long_names", {"type": "string", "pattern": "^\\p{Lu}\\p{Ll}*\\p{gc=Decimal_Number}?$"}),
    ("symbols_punctuation", {"type": "string", "pattern": "^[\\p{S}\\p{P}]+$", "maxLength": 2}),
    ("numbers_and_separators", {"type": "string", "pattern": "^\\p{N}+(\\p{Zs}\\p{N}+)*$"}),
    ("other_and_marks", {"type": "string", "pattern": "^[\\p{C}\\p{M}]$"}),
]

# Candidates beside the sampled ones, for cases whose language turns on a word.
SEEDS = {"tag_key_not_aws": ["aws:", "aws:x", "aws", "awsx", "aws.", "Aws:", "xaws:", "aw:s", "aws:é", "a:w", "aws:xyz"]}


def ours(cp):
    return unicodedata.category(chr(cp))


def theirs_agree(ch):
    # The regex module's own category of ch must be unicodedata's.
    return bool(regex.fullmatch(r"\p{" + unicodedata.category(ch) + "}", ch))


def main():
    chars = [c for c in SAMPLE if theirs_agree(c)]
    dropped = len(SAMPLE) - len(chars)
    out = {"tool": f"regex {importlib.metadata.version('regex')} search (Unicode properties) + length in code points; "
                   f"table from unicodedata {unicodedata.unidata_version}",
           "dropped_version_differences": dropped, "cases": []}
    for name, schema in CASES:
        pat = regex.compile(schema["pattern"])
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 1 << 30)
        cands = set()
        for a in chars:
            cands.add(a)
            for b in chars[::13]:
                cands.add(a + b)
        for a in chars[::6]:
            for b in chars[1::9]:
                cands.add("A" + a + b)
                cands.add(a + b + a + b + "1")
        cands.add("")
        cands.update(SEEDS.get(name, []))
        candidates = []
        for s in sorted(cands):
            if "\\" in s or '"' in s or any(ord(c) < 0x20 for c in s):
                continue  # JSON escapes are tested elsewhere; here raw characters
            valid = pat.search(s) is not None and lo <= len(s) <= hi
            candidates.append({"text": json.dumps(s, ensure_ascii=False), "valid": valid})
        assert any(c["valid"] for c in candidates) and not all(c["valid"] for c in candidates), name
        out["cases"].append({"name": name, "schema": schema, "candidates": candidates})
    text = json.dumps(out, ensure_ascii=False, indent=0) + "\n"
    subprocess.run(["zstd", "-19", "-q", "-f", "-o", OUT], input=text.encode(), check=True)
    print(f"wrote {OUT}: {len(out['cases'])} schemas, {sum(len(c['candidates']) for c in out['cases'])} candidates "
          f"({dropped} sample characters left out for Unicode version differences)")


if __name__ == "__main__":
    main()
