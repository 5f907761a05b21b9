"""Goldens for the masks of a length bound whose large items are read through
shared item rules (automaton.cpp: layers past the bound's state budget on
Llama-3): a token may start inside such an item (a multi-byte character
read by the JSON character's rule), end the string and go on into the
caller (`…"\\n\\n`, `。",\\n`). The documents are judged by `jsonschema`
(Draft 2020-12, a pattern is a Python `re` search);
tests/grammar/pattern_length_unicode_test.cpp checks the verdicts and, from
each prefix given, every Llama-3 token's mask bit against the matcher.

  python3 tools/oracle/item_rule_mask_goldens.py   # writes tests/grammar/golden/item_rule_masks.json
"""
import json
import os

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "item_rule_masks.json")
# CloudFormation's policy documents (printable ASCII and Latin-1) with an
# optional suffix of \w that makes the layers large enough to share items.
PATTERN = "[\\u0009\\u000A\\u000D\\u0020-\\u007E\\u00A1-\\u00FF]+(x|\\w\\w\\w\\w\\w)?"
DOCS = ['["ÐR…"\n\n]', '["ab。",\n"c"]', '["ab！","c"]', '["ÐRā"\n]', '["x…a"\n]', '["…"]', '["ā"]', '[""]',
        '["a"]', '["é…" ]', '["ab", "…ā"]']
PREFIXES = ['["ÐR', '["ab', '["x…', '["ab", "c']
CASES = []
for name, hi in [("policy_items_20480", 20480), ("policy_items_200", 200)]:
    schema = {"type": "array", "items": {"type": "string", "pattern": PATTERN, "minLength": 1, "maxLength": hi}}
    validator = jsonschema.Draft202012Validator(schema)
    cands = [{"text": d, "valid": validator.is_valid(json.loads(d))} for d in DOCS]
    CASES.append({"name": name, "schema": schema, "prefixes": PREFIXES, "candidates": cands})
judged_goldens.write(OUT, "tools/oracle/item_rule_mask_goldens.py", CASES, ensure_ascii=False)
