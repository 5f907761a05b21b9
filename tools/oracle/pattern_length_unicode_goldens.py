"""Goldens for patterns with Unicode classes (\\w, \\p{L}, \\s ...) under
large minLength/maxLength, where the pattern's length varies in several
places (one count over the whole pattern, Expr::Kind::kLengthBound): on
Llama-3 such a bound is too large with every class's UTF-8 states written
out in each layer (counted window of 128 items), so its large items are
calls of shared item rules (automaton.cpp, RuleBuilder::item_rule). For each
schema, candidate strings at lo - 1, lo, lo + 1, hi - 1, hi, hi + 1
characters, grown with ASCII, two-byte (é), three-byte (中) and four-byte
(𝑥, U+1D465, a letter) characters, a multi-byte character as the one at the
bound, and broken variants; `jsonschema`'s verdict (Draft 2020-12, Python
`re`: \\w \\d \\s are Unicode). tests/grammar/pattern_length_unicode_test.cpp
checks that the grammar accepts exactly the valid ones and that Llama-3
masks across the bounds are exact.

  python3 tools/oracle/pattern_length_unicode_goldens.py   # writes tests/grammar/golden/pattern_length_unicode.json
"""
import json
import os

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "pattern_length_unicode.json")

CASES = []


def case(name, pattern, lo, hi, shapes, extra=()):
    """shapes: (prefix, unit, suffix): prefix + unit * k + suffix for every
    k that gives a length around the bounds; extra: fixed strings."""
    schema = {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": hi}
    totals = sorted({t for b in (lo, hi) for t in (b - 1, b, b + 1) if t >= 0} | {(lo + hi) // 2})
    values = []
    for prefix, unit, suffix in shapes:
        for t in totals:
            k, r = divmod(t - len(prefix) - len(suffix), len(unit))
            if k >= 0 and r == 0:
                values.append([(prefix, 1), (unit, k), (suffix, 1)])
    values += [[(v, 1)] for v in extra]
    validator = jsonschema.Draft202012Validator(schema)
    out, seen = [], set()
    for parts in values:
        v = "".join(p * k for p, k in parts)
        if v in seen:
            continue
        seen.add(v)
        doc = [['"', 1]] + [[json.dumps(p, ensure_ascii=False)[1:-1], k] for p, k in parts if p and k] + [['"', 1]]
        out.append({"parts": doc, "valid": validator.is_valid(v)})
    CASES.append({"name": name, "schema": schema, "candidates": out})


WORD = r"^[\w+=,.@-]+(/[\w+=,.@-]+)*$"
case("word_path_20_2048", WORD, 20, 2048, [
    ("", "a", ""), ("x/", "é", ""), ("", "中", "/y"), ("a/", "b", "/c"), ("", "𝑥", ""), ("", "ab", "中"),
    ("", "a", "é"), ("", "a", "𝑥"), ("/", "a", ""), ("", "a", "/"), ("", "a", " "), ("", "a", "!")])
case("word_path_1_256", WORD, 1, 256, [
    ("", "a", ""), ("", "é", ""), ("", "中", ""), ("", "a", "𝑥"), ("x/", "é", "/y"), ("", "a", "/"),
    ("", "a", "\u00a0")], extra=["", "/", "a", "é", "中", "𝑥", "a/b", "a//b"])
case("letters_spaces_5_200", r"^[\w\s]+(-\d+)?$", 5, 200, [
    ("", "a b", ""), ("", "é", "-12"), ("", "中 ", "-1"), ("", "\u3000", "x"), ("", "𝑥", "-"), ("", "a", "-1-2"),
    ("", "٣", "")], extra=["abcd", "abcde", "a-1", "abc-1", "abcd-"])
case("words_0_1024", r"^(\w+\.)?[\w:/=@-]*$", 0, 1024, [
    ("", "a", ""), ("12.", "é", ""), ("٣.", "中", ""), ("", "𝑥", "!"), ("1.", "a", "."), ("", "a", "\u2028")],
    extra=["", "1.", ".", "1..a"])

judged_goldens.write(OUT, "tools/oracle/pattern_length_unicode_goldens.py", CASES, ensure_ascii=False)
