"""Goldens for counted repetitions: JSON Schema length and item bounds far
above what is unrolled (minLength/maxLength/minItems/maxItems in the
thousands up to 2^31 - 1). For each schema, candidate documents a few
characters or items around each bound, written with one-byte, two- and
four-byte UTF-8 characters and escapes (one character each), and
`jsonschema`'s verdict (Draft 2020-12). tests/grammar/length_counter_test.cpp
checks that the grammar accepts exactly the valid ones and that masks near
the bounds are exact.

A candidate is stored as parts [[text, times], ...] (its JSON text is each
text repeated `times` times, concatenated; a third element "indexed" puts
the repetition's index, from 0, in place of each "{i}": distinct keys), so
20,000-character strings cost a few bytes here.

  python3 tools/oracle/length_counter_goldens.py   # writes tests/grammar/golden/length_counter.json
"""
import importlib.metadata
import json
import os

import jsonschema

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "length_counter.json")

# One character each, as JSON string content: ASCII, two-byte UTF-8, four-byte
# UTF-8, and escapes (a short one and a \u one).
UNITS = ["a", "\u00e9", "\U0001F600", "\\n", "\\u00e9", "\\\""]


def string_parts(n, last="a", body="a"):
    """A JSON string of n characters: n - 1 of `body` then one `last`."""
    if n == 0:
        return [['"', 1], ['"', 1]]
    return [['"', 1], [body, n - 1], [last, 1], ['"', 1]]


def around(bound, width=2):
    return [n for n in range(bound - width, bound + width + 1) if n >= 0]


def string_candidates(bounds):
    out = []
    for b in bounds:
        for n in around(b):
            for unit in UNITS:
                out.append(string_parts(n, last=unit))
        out.append(string_parts(b, body="\u00e9"))  # every character two bytes
        out.append(string_parts(b + 1, body="\\t"))  # every character an escape
    out.append(string_parts(0))
    out.append(string_parts(1))
    return out


def array_parts(n, item='"x"'):
    if n == 0:
        return [["[", 1], ["]", 1]]
    return [["[", 1], [item + ", ", n - 1], [item, 1], ["]", 1]]


def object_parts(n, value="1", declared=""):
    """An object: the `declared` members' text first, then n more members (keys k0, k1, ..., last)."""
    head = [["{", 1]] + ([[declared, 1]] if declared else [])
    if n == 0:
        return head + [["}", 1]]
    sep = ", " if declared else ""
    return head + [[sep, 1], ['"k{i}": ' + value + ", ", n - 1, "indexed"], ['"last": ' + value, 1], ["}", 1]]


CASES = [
    ("max_length_20000", {"type": "string", "maxLength": 20000}, string_candidates([20000])),
    ("min_max_length_12000_12005", {"type": "string", "minLength": 12000, "maxLength": 12005},
     string_candidates([12000, 12005])),
    ("min_length_15000", {"type": "string", "minLength": 15000}, string_candidates([15000])),
    ("exact_length_10001", {"type": "string", "minLength": 10001, "maxLength": 10001}, string_candidates([10001])),
    ("max_length_int32", {"type": "string", "maxLength": 2147483647}, string_candidates([3])),
    ("pattern_max_length_30000", {"type": "string", "pattern": "^[a-z]+$", "maxLength": 30000},
     [string_parts(n) for n in around(30000)] + [string_parts(n, last="\u00e9") for n in around(30000)] +
     [string_parts(0), string_parts(1)]),
    ("max_items_20000", {"type": "array", "items": {"type": "string"}, "maxItems": 20000},
     [array_parts(n) for n in around(20000)] + [array_parts(0), array_parts(1)]),
    ("min_max_items_11000_11003", {"type": "array", "items": {"type": "integer"}, "minItems": 11000, "maxItems": 11003},
     [array_parts(n, "7") for n in around(11000) + around(11003)] + [array_parts(n, '"7"') for n in [11001]]),
    ("object_with_long_string",
     {"type": "object", "properties": {"text": {"type": "string", "maxLength": 50000}, "n": {"type": "integer"}},
      "required": ["text", "n"], "additionalProperties": False},
     [[['{"text": ', 1]] + string_parts(n, last=u) + [[', "n": 1}', 1]] for n in around(50000) for u in ["a", "\\n"]]),
    ("max_properties_1000", {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 1000},
     [object_parts(n) for n in around(1000)] + [object_parts(0), object_parts(1), object_parts(999, '"s"')]),
    ("min_max_properties_declared_300_302",
     {"type": "object", "properties": {"id": {"type": "string"}, "tag": {"type": "string"}}, "required": ["id"],
      "additionalProperties": {"type": "integer"}, "minProperties": 300, "maxProperties": 302},
     [object_parts(n, declared='"id": "x"') for n in around(300) + around(302)] +
     [object_parts(n, declared='"id": "x", "tag": "t"') for n in around(301)] +
     [object_parts(300, declared='"tag": "t"')]),
]


def text_of(parts):
    out = []
    for p in parts:
        if len(p) == 3:
            out.extend(p[0].replace("{i}", str(i)) for i in range(p[1]))
        else:
            out.append(p[0] * p[1])
    return "".join(out)


def main():
    validator_cls = jsonschema.Draft202012Validator
    cases = []
    for name, schema, candidates in CASES:
        validator = validator_cls(schema)
        seen, out = set(), []
        for parts in candidates:
            text = text_of(parts)
            if text in seen:
                continue
            seen.add(text)
            out.append({"parts": parts, "valid": validator.is_valid(json.loads(text))})
        assert any(c["valid"] for c in out) and any(not c["valid"] for c in out) or name == "max_length_int32", name
        cases.append({"name": name, "schema": schema, "candidates": out})
    golden = {"generator": "tools/oracle/length_counter_goldens.py",
              "jsonschema": importlib.metadata.version("jsonschema"), "draft": "2020-12", "cases": cases}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} schemas, {sum(len(c['candidates']) for c in cases)} candidates")


if __name__ == "__main__":
    main()
