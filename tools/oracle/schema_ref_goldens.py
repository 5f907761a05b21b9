"""Goldens for `$ref` beyond JSON pointers from the root: a 2019-09+
`$anchor` ("#node"), a draft-07 plain-name `$id` ("#item"), the root's own
`$id` URI with a pointer fragment, and a subschema's `$id` named relative
to the root's and absolutely (schema_refs.cpp). Each candidate document is
judged by `jsonschema` (its `referencing` resolves the same references,
nothing fetched). tests/grammar/schema_refs_test.cpp checks that the
grammar accepts exactly the valid ones.

  python3 tools/oracle/schema_ref_goldens.py   # writes tests/grammar/golden/schema_refs.json
"""
import json
import os

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "schema_refs.json")
CASES = []


def case(name, schema, docs):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    v = cls(schema)
    out = [{"text": json.dumps(d), "valid": v.is_valid(d)} for d in docs]
    assert any(c["valid"] for c in out) and any(not c["valid"] for c in out), name
    CASES.append({"name": name, "schema": schema, "candidates": out})


TREE = [{"v": 1}, {"v": 1, "c": [{"v": 2}]}, {"v": 1, "c": [{"v": "x"}]}, {"c": []}, {"v": 1, "c": [{"v": 2, "c": [{"v": 3}]}]},
        {"v": 1, "x": 2}, {"v": 1, "c": [{"v": 2, "c": [{}]}]}, {"v": -4, "c": []}, []]
case("anchor_tree", {"$defs": {"n": {"$anchor": "node", "type": "object",
                                     "properties": {"v": {"type": "integer"}, "c": {"type": "array", "items": {"$ref": "#node"}}},
                                     "required": ["v"], "additionalProperties": False}},
                     "$ref": "#/$defs/n"}, TREE)
case("draft7_plain_name_id", {"$schema": "http://json-schema.org/draft-07/schema#",
                              "definitions": {"a": {"$id": "#item", "type": "string", "maxLength": 3}},
                              "type": "array", "items": {"$ref": "#item"}},
     [[], ["a"], ["abc", ""], ["abcd"], [1], ["ab", "abcd"], {}])
case("root_id_uri", {"$id": "https://example.com/schemas/root.json",
                     "definitions": {"p": {"type": "integer", "minimum": 0}},
                     "type": "object", "properties": {"x": {"$ref": "https://example.com/schemas/root.json#/definitions/p"},
                                                      "y": {"$ref": "root.json#/definitions/p"}},
                     "additionalProperties": False},
     [{}, {"x": 0}, {"x": -1}, {"x": 3, "y": 4}, {"y": -2}, {"x": 1.5}, {"z": 1}])
ITEM = {"$id": "item.json", "type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}
ITEMS = [[], [{"k": "a"}], [{"k": "c"}], [{"k": "b"}, {"k": "a", "z": 1}], [{}], [1]]
case("subschema_id_relative", {"$id": "https://example.com/schemas/root.json", "$defs": {"item": ITEM},
                               "type": "array", "items": {"$ref": "item.json"}}, ITEMS)
case("subschema_id_absolute", {"$id": "https://example.com/schemas/root.json", "$defs": {"item": ITEM},
                               "type": "array", "items": {"$ref": "https://example.com/schemas/item.json"}}, ITEMS)

judged_goldens.write(OUT, "tools/oracle/schema_ref_goldens.py", CASES)
