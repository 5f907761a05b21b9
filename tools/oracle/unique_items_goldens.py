"""Goldens for uniqueItems over items a grammar cannot enumerate (strings,
objects, numbers, nested arrays, any value): for each schema, candidate
documents written as JSON text (spellings json.dumps never writes: `1.0`,
`"\\u0061"`, keys in another order, blanks) and `jsonschema`'s verdict
(Draft 2020-12). tests/grammar/unique_items_runtime_test.cpp checks that
the matcher accepts exactly the valid ones, and every token's mask bit
against what the matcher accepts at every step.

  python3 tools/oracle/unique_items_goldens.py   # writes tests/grammar/golden/unique_items.json
"""
import importlib.metadata
import json
import os

import jsonschema

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "unique_items.json")


def unique(items, **extra):
    return {"type": "array", "items": items, "uniqueItems": True, **extra}


STRINGS = [
    '[]', '["a"]', '["a", "a"]', '["a","b"]', '["a", "b", "a"]', '["a", "\\u0061"]', '["\\u0061", "a"]',
    '[ "ab" , "ab" ]', '["ab", "abc"]', '["abc", "ab"]', '["", ""]', '["", "a", ""]', '["\\n", "\\u000a"]',
    '["\\ud83d\\ude00", "\U0001F600"]', '["\\ud83d", "\\ud83d"]', '["\\/", "/"]', '["é", "\\u00e9"]',
    '["é", "\\u00E9"]', '["a\\"", "a\\""]', '["x", "y", "z", "x"]', '["x", "y", "z", "w"]',
]
NUMBERS = [
    '[1, 1]', '[1, 1.0]', '[1, 1e0]', '[1.0, 1]', '[1, 10e-1]', '[0, -0]', '[0, -0.0]', '[0.1, 0.10]',
    '[0.1, 0.2]', '[10, 1]', '[1, 10]', '[12, 1, 2, 12]', '[100000000000000000000001, 1e23]',
    '[10000000000000000000000, 1e22]', '[1e400, 2e400]', '[1.5, 15e-1]', '[2, 3, 4]', '[-1, 1]',
]
OBJECTS = [
    '[{"a": 1, "b": 2}, {"b": 2, "a": 1}]', '[{"a": 1}, {"a": 1.0}]', '[{"a": 1}, {"a": 2}]',
    '[{}, {}]', '[{}, {"a": null}]', '[{"a": {"x": [1, 2]}}, {"a": {"x": [1, 2.0]}}]',
    '[{"a": {"x": [1, 2]}}, {"a": {"x": [2, 1]}}]', '[{"a": "x"}, { "a" : "x" }]', '[{"a": true}, {"a": 1}]',
    '[{"a": 1, "a": 2}, {"a": 2}]', '[{"a": 1, "a": 2}, {"a": 1}]',
]
TAGS = [
    '[{"Key": "a", "Value": "b"}, {"Key": "a", "Value": "b"}]', '[{"Key": "a", "Value": "b"}, {"Value": "b", "Key": "a"}]',
    '[{"Key": "a", "Value": "b"}, {"Key": "a", "Value": "c"}]', '[{"Key": "a", "Value": "b"}]',
]
ANY = [
    '[1, "1"]', '[true, 1]', '[false, 0]', '[null, null]', '[true, true]', '[[1], [1]]', '[[1], [1.0]]',
    '[[1, 2], [2, 1]]', '["a", ["a"]]', '[{"a": [1]}, {"a": [1]}]', '[[], {}]', '[[], []]', '[1, "a", 1]',
    '[[true], [1]]', '["x", {"x": 1}, "x"]',
]
NESTED = [
    '[["a", "b"], ["a", "b"]]', '[["a", "b"], ["b", "a"]]', '[["a", "a"], ["b"]]', '[["a"], ["a", "b"]]',
    '[[], []]', '[["\\u0061"], ["a"]]',
]
CASES = [
    ("strings", unique({"type": "string"}), STRINGS + ['[1]', '["a", 1]']),
    ("strings_short", unique({"type": "string", "maxLength": 3}, minItems=1),
     ['["abc", "abc"]', '["abc", "ab"]', '["ab", "abc"]', '[]', '["abcd"]', '["a", "b", "c", "a"]']),
    ("strings_pattern", unique({"type": "string", "pattern": "^[a-z]+$"}),
     ['["ab", "ab"]', '["ab", "cd"]', '["ab", "a"]', '["Ab"]']),
    ("strings_enum", unique({"enum": ["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white", "gray"]}),
     ['["red", "red"]', '["red", "green", "red"]', '["red", "green", "gray"]', '["pink"]']),
    ("numbers", unique({"type": "number"}), NUMBERS),
    ("integers_counted", unique({"type": "integer"}, maxItems=400),
     ['[1, 2, 3, 1]', '[1, 2, 3, 4]', '[5, 50, 500, 5]', '[5, 50, 500, 5000]']),
    ("objects", unique({"type": "object"}), OBJECTS),
    ("tags", unique({"type": "object", "properties": {"Key": {"type": "string"}, "Value": {"type": "string"}},
                     "required": ["Key", "Value"], "additionalProperties": False}), TAGS),
    ("any", {"type": "array", "uniqueItems": True}, ANY + STRINGS[:8] + NUMBERS[:8] + OBJECTS[:4]),
    ("nested", unique(unique({"type": "string"})), NESTED),
    ("two_arrays", {"type": "object", "properties": {"a": unique({"type": "string"}), "b": unique({"type": "string"})}},
     ['{"a": ["x"], "b": ["x"]}', '{"a": ["x", "y"], "b": ["y", "x"]}', '{"a": ["x", "x"], "b": []}',
      '{"a": ["x"], "b": ["y", "y"]}']),
    ("any_of", {"anyOf": [unique({"type": "string"}), {"type": "string"}]},
     ['["a", "a"]', '["a", "b"]', '"a"', '[1]']),
    ("string_or_number", unique({"type": ["string", "number"]}),
     ['["1", 1]', '[1, 1.0]', '["1", "1"]', '["a", 2, "b", 2.0]']),
]


def main():
    out = {"generator": "tools/oracle/unique_items_goldens.py",
           "judge": f"jsonschema {importlib.metadata.version('jsonschema')} (Draft 2020-12)", "cases": []}
    for name, schema, candidates in CASES:
        validator = jsonschema.Draft202012Validator(schema)
        rows = []
        for text in candidates:
            rows.append({"text": text, "valid": validator.is_valid(json.loads(text))})
        out["cases"].append({"name": name, "schema": schema, "candidates": rows})
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n = sum(len(c["candidates"]) for c in out["cases"])
    print(f"wrote {OUT}: {len(out['cases'])} schemas, {n} candidates")


if __name__ == "__main__":
    main()
