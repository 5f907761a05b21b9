"""Goldens for `pattern` with minLength/maxLength where the pattern is not a
sequence of one-character atoms (several parts vary: `^arn:aws([a-z]|-)*:
...:secret:.+$` with maxLength 1600, DNS labels, regions, unanchored
searches): one count of characters over the whole pattern (the grammar's
`%{m,n}`, Expr::Kind::kLengthBound). For each schema, candidate strings
of lengths a few characters around each bound, with the length spread over
different varying parts, and broken variants; `jsonschema`'s verdict
(Draft 2020-12; patterns are Python `re` searches, so candidates stay in
ASCII where the pattern has \\w or \\d, and a candidate ending in a newline
is kept only where Python's `$` and ECMA-262's read it alike). tests/grammar/pattern_length_test.cpp
checks that the grammar accepts exactly the valid ones and that masks near
the bounds are exact.

A candidate is stored as parts [[text, times], ...] of its JSON text (as in
length_counter.json), so 20,000-character strings cost a few bytes here.

  python3 tools/oracle/pattern_length_goldens.py   # writes tests/grammar/golden/pattern_length.json
"""
import json
import os
import re

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "pattern_length.json")


def around(bound, width=2):
    return [n for n in range(bound - width, bound + width + 1) if n >= 0]


CASES = []


def case(name, pattern, lo, hi, shapes, extra=()):
    """shapes: ([pieces], index of the growing piece); each is filled to every
    length around the bounds (and a few in between); extra: fixed strings."""
    schema = {"type": "string", "pattern": pattern}
    if lo is not None:
        schema["minLength"] = lo
    if hi is not None:
        schema["maxLength"] = hi
    totals = set()
    for b in [lo or 0] + ([hi] if hi is not None else []):
        totals.update(around(b, 3))
    totals.update([(lo or 0) + 7, (lo or 0) + 20])
    if hi is not None:
        totals.update([hi // 2, hi - 40])
    cands = []
    for pieces, grow in shapes:
        for t in sorted(totals):
            f = judged_goldens.fill(pieces, t, grow)
            if f is not None:
                cands.append(f)
    for s in extra:
        cands.append([(s, 1)])
    validator = jsonschema.Draft202012Validator(schema)
    out, seen = [], set()
    for parts in cands:
        value = "".join(p * k for p, k in parts)
        if value in seen:
            continue
        seen.add(value)
        if value.endswith("\n") and pattern.endswith("$"):
            # Python's $ also matches before a final newline, ECMA-262's does not: keep only
            # the candidates where both read the same.
            ecma = validator.is_valid(value) and re.search(pattern[:-1] + r"\Z", value) is not None
            if ecma != validator.is_valid(value):
                continue
        doc = [['"', 1]] + [[json.dumps(p, ensure_ascii=False)[1:-1], k] for p, k in parts if k] + [['"', 1]]
        out.append({"parts": doc, "valid": validator.is_valid(value)})
    CASES.append({"name": name, "schema": schema, "candidates": out})


SECRET = r"^(^arn:aws([a-z]|\-)*:secretsmanager:([a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\d{1}):(\d{12}):secret:.+)$"
case("arn_secret_1600", SECRET, 1, 1600, [
    (["arn:aws", "a", ":secretsmanager:us-east-1:123456789012:secret:x"], 1),  # the first loop long
    (["arn:aws:secretsmanager:us-gov-west-1:123456789012:secret:", "y"], 1),  # the last one long
    (["arn:aws", "-", ":secretsmanager:eu-iso-central-2:123456789012:secret:", "z"], 3),
    (["arn:aws", "b", ":secretsmanager:us-east-1:12345678901:secret:x"], 1),  # 11 digits: never valid
    (["arn:aws", "c", ":secretsmanager:us-east-1:123456789012:secret:"], 1),  # nothing after secret:
], extra=["arn:aws:secretsmanager:us-east-1:123456789012:secret:k"])
case("dns_label_63", r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$", 1, 63, [
    (["a", "-b"], 1), (["a", "b"], 1), (["x", "--y"], 1), (["z", "-b", "-"], 1), (["-", "a"], 1)],
    extra=["", "a", "a-", "-a", "ab--c"])
case("region_16", r"^([a-z]+-){2,3}\d$", 0, 16, [
    (["us-", "e", "ast-1"], 1), (["a", "a", "-b-c-1"], 1), (["ab-cd-", "e", "-9"], 2), (["a-b-c-d-", "e", "-1"], 1)],
    extra=["us-east-1", "a-b-1", "a-1", "us-east-12", ""])
case("search_arn_256", r"arn:aws(-[\w]+)*:.+:.+:[0-9]{12}:.+", 0, 256, [
    (["x", "arn:aws-cn:s3:r:123456789012:obj"], 0), (["arn:aws", "-ab", ":s3:r:123456789012:o"], 1),
    (["arn:aws:s3:r:123456789012:", "o"], 1), (["arn:aws:s3:r:12345678901", "2", ":o"], 1),
    (["arn:aws:s3:r:123456789012:o", "p"], 1)],
    extra=["arn:aws:s3:r:123456789012:", "arn:aws:s:r:123456789012:o"])
case("hyphenated_min5", r"^[a-z]+(-[a-z]+)*$", 5, None, [
    (["a", "-b"], 1), (["ab", "c"], 1), (["a-", "b"], 1), (["a-b", "-"], 1)],
    extra=["ab-c", "ab-cd", "abcde", "abcd", "a-b-c-d", "-abcde", "abcde-"])
case("counted_300_20000", r"^a(b|cd)*$", 300, 20000, [
    (["a", "b"], 1), (["a", "cd"], 1), (["a", "b", "cd"], 2), (["a", "cd", "b"], 2), (["a", "bc"], 1), (["b", "b"], 1)])
case("escapes_3_12", '^(a|\u00e9|\n|")+b*$', 3, 12, [
    (["a", "b"], 1), (["\u00e9", "b"], 1), (["\n", "\"", "b"], 2), (["\"", "a"], 1), (["\u00e9", "\n", "b"], 1),
    (["\"", "\u00e9\n"], 1), (["bb", "a"], 1)],
    extra=["ab", "\"\"\"", "a\nb", "\u00e9b\u00e9"])
case("placeholder_256", r"^\$\{(\w+.)+\w+\}$", 0, 256, [
    (["${", "ab.", "c}"], 1), (["${a", "b", ".c}"], 1), (["${a.", "b", "}"], 1), (["${", "a", "}"], 1),
    (["$", "{", "a.b}"], 1)],
    extra=["${a.b}", "${a}", "${.b}", "${a..b}"])

judged_goldens.write(OUT, "tools/oracle/pattern_length_goldens.py", CASES)
