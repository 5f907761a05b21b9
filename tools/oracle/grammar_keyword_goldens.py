"""Goldens for the JSON Schema keywords that xgrammar ignores or
approximates (minProperties/maxProperties, multipleOf, patternProperties,
propertyNames, fixed-length formats with minLength/maxLength): for each
schema, candidate documents and `jsonschema`'s verdict (Draft 2020-12 with
the format checker). tests/grammar/keywords_test.cpp checks that the
grammar accepts exactly the valid ones (compact separators ", " / ": ",
which json.dumps also writes).

  python3 tools/oracle/grammar_keyword_goldens.py   # writes tests/grammar/golden/schema_keywords.json
"""
import importlib.metadata
import json
import os

import jsonschema

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "schema_keywords.json")

CASES = [
    ("min_max_properties_additional",
     {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2, "maxProperties": 3},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "c": 3, "d": 4},
      {"a": "x", "b": 2}]),
    ("min_properties_declared_optional",
     {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "boolean"}, "z": {"type": "null"}},
      "minProperties": 2, "additionalProperties": False},
     [{}, {"x": 1}, {"y": True}, {"x": 1, "y": False}, {"x": 1, "z": None}, {"y": True, "z": None},
      {"x": 1, "y": True, "z": None}, {"z": None}]),
    ("max_properties_required_and_extra",
     {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}, "required": ["id"],
      "additionalProperties": {"type": "boolean"}, "maxProperties": 2},
     [{"id": "a"}, {"id": "a", "n": 1}, {"id": "a", "extra": True}, {"id": "a", "n": 1, "extra": True},
      {"n": 1}, {"id": "a", "x": True, "y": False}]),
    ("max_properties_zero", {"type": "object", "maxProperties": 0}, [{}, {"a": 1}]),
    ("min_properties_any_object", {"type": "object", "minProperties": 1}, [{}, {"a": 1}, {"a": [1, {"b": None}], "c": "d"}]),
    ("multiple_of_integer", {"type": "integer", "multipleOf": 7},
     [0, 7, -7, 14, 70, 343, 700, 7007, 1, -1, 8, 13, 15, 71, 100, 7008]),
    ("multiple_of_integer_in_object",
     {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 12}}, "required": ["n"]},
     [{"n": 0}, {"n": 24}, {"n": -36}, {"n": 1200}, {"n": 6}, {"n": 1212}, {"n": 1213}]),
    ("multiple_of_number_cents", {"type": "number", "multipleOf": 0.01},
     [0, 1, 1.5, 1.25, -3.07, 10.1, 1.001, 2.999, 0.005]),
    ("multiple_of_number_integer_divisor", {"type": "number", "multipleOf": 5}, [0, 5, -10, 25, 3, 26, 2.5]),
    ("pattern_properties",
     {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"x_a": 1}, {"x_abc": 2, "x_d": 3}, {"y": 1}, {"x_": 1}, {"x_a": "s"}, {"x_A": 1}]),
    ("property_names_pattern",
     {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,4}$"}, "additionalProperties": {"type": "integer"}},
     [{}, {"ab": 1}, {"abcd": 2, "e": 3}, {"abcde": 1}, {"A": 1}, {"ab": "x"}, {"": 1}]),
    ("property_names_enum",
     {"type": "object", "propertyNames": {"enum": ["red", "green"]}, "minProperties": 1},
     [{}, {"red": 1}, {"red": 1, "green": [2]}, {"blue": 1}]),
    ("format_uuid_with_length",
     {"type": "string", "format": "uuid", "minLength": 36, "maxLength": 36},
     ["123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400", "not-a-uuid"]),
    ("format_date_with_length", {"type": "string", "format": "date", "maxLength": 10},
     ["2024-02-29", "2024-13-01", "24-01-01"]),
]


def main():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    out = {"tool": f"jsonschema {importlib.metadata.version('jsonschema')} (Draft 2020-12, format checker)",
           "separators": "json.dumps defaults: ', ' and ': '", "cases": []}
    for name, schema, docs in CASES:
        validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
        candidates = [{"text": json.dumps(d), "valid": validator.is_valid(d)} for d in docs]
        assert any(c["valid"] for c in candidates) and not all(c["valid"] for c in candidates), name
        out["cases"].append({"name": name, "schema": schema, "candidates": candidates})
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out['cases'])} schemas, {sum(len(c['candidates']) for c in out['cases'])} candidates")


if __name__ == "__main__":
    main()
