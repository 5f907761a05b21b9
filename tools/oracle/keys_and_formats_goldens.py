"""Goldens for keywords whose grammar needs key or string languages met,
complemented or intersected (regex_dfa.h's product): patternProperties
beside properties, required and additionalProperties (keys matching
several patterns, declared keys a pattern matches, the keys no pattern
matches), unevaluatedProperties beside allOf and $ref, a format beside a
pattern, not {anyOf: [{pattern}, ...]}, and format: regex. The object
schemas are the corpus' shapes (Jupyter's mimebundle and v3 outputs,
CloudFormation's custom resource, Compose's x- extensions, Meltano's
plugins) and small ones per rule.

Each candidate is judged by `jsonschema` (Draft 2020-12 with its format
checker; schemas with a `$schema` by theirs). Where our reading and the
judge's may differ on purpose, candidates are left out and the rule is
documented in docs/grammar.md:
  - a key or string ending in a newline where a pattern has a `$` (Python's
    `$` also matches before a final newline, ECMA-262's does not; the
    grammar writes neither such key);
  - format: uri, which this judge does not check (no rfc3987): only
    candidates that are URIs by RFC 3986's syntax, or that the pattern
    rejects, are kept;
  - format: regex, valid regexes outside the part the grammar writes
    (back-references, named groups, lookbehind, inline flags) are left out;
    every regex of that part is checked to compile (re.compile) on 20,000
    random ones, and the kept candidates are judged as they are.
tests/grammar/keys_and_formats_test.cpp checks that the grammar accepts
exactly the valid ones and that its masks are exact.

  python3 tools/oracle/keys_and_formats_goldens.py   # writes tests/grammar/golden/keys_and_formats.json
"""
import json
import os
import random
import re

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "keys_and_formats.json")
CASES = []

URI = judged_goldens.URI



def validator_of(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def keys_of(doc):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from keys_of(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from keys_of(v)


def case(name, schema, docs, keep=lambda doc, valid: True):
    v = validator_of(schema)
    out, seen = [], set()
    for d in docs:
        text = json.dumps(d, ensure_ascii=False)
        if text in seen or any(k.endswith("\n") for k in keys_of(d)) or not keep(d, v.is_valid(d)):
            continue
        seen.add(text)
        out.append({"text": text, "valid": v.is_valid(d)})
    assert any(c["valid"] for c in out) and any(not c["valid"] for c in out), name
    CASES.append({"name": name, "schema": schema, "candidates": out})


def objects(keys, values, rng, n=60, extra=(), base=None):
    """Single-key objects of every key and value (after `base`'s members),
    and seeded mixes; members in the order of `keys` (the grammar writes
    declared keys in declaration order, the others after them)."""
    docs = _objects(keys, values, rng, n, extra, base)
    return [{k: d[k] for k in sorted(d, key=lambda k: keys.index(k) if k in keys else len(keys))} for d in docs]


def _objects(keys, values, rng, n, extra, base):
    docs = [{}] + [{k: v} for k in keys for v in values] + list(extra)
    if base:
        docs += [dict(base)] + [dict(base, **{k: v}) for k in keys for v in values if k not in base]
    for _ in range(n):
        d = dict(base or {})
        for k in rng.sample(keys, rng.randrange(1, min(4, len(keys)) + 1)):
            d[k] = rng.choice(values)
        docs.append(d)
    return docs


MULTILINE = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
VALUES = [1, "s", ["a", "b"], [1], {}, None, True, -2, 2.5]

# Jupyter nbformat v4's mimebundle: JSON mimetypes take any value, other keys a multiline string.
rng = random.Random(1)
case("mimebundle", {"type": "object", "additionalProperties": {"$ref": "#/$defs/ml"},
                    "patternProperties": {"^application/(.*\\+)?json$": {}}, "$defs": {"ml": MULTILINE}},
     objects(["application/json", "application/vnd.x+json", "application/jsonx", "xapplication/json", "text/plain",
              "application/+json", "", "é", "a\"b"], VALUES, rng))
# nbformat v3's pyout: declared keys, a mimetype pattern, nothing else.
rng = random.Random(2)
case("pyout", {"type": "object", "additionalProperties": False, "required": ["output_type"],
               "properties": {"output_type": {"enum": ["pyout"]}, "text": MULTILINE, "png": MULTILINE},
               "patternProperties": {"^[a-zA-Z0-9]+/[a-zA-Z0-9\\-\\+\\.]+$": MULTILINE}},
     objects(["output_type", "text", "png", "text/plain", "image/svg+xml", "a/b/c", "/x", "zz"],
             ["pyout", "s", ["a"], 1, "other"], rng, n=100,
             extra=[{"output_type": "pyout", "text/plain": "x", "a/b": ["y"]}, {"output_type": "pyout", "zz": 1}],
             base={"output_type": "pyout"}))
# CloudFormation's custom resource: every key matches .*, declared ones meet its types.
rng = random.Random(3)
case("custom_resource", {"additionalProperties": False, "required": ["ServiceToken"],
                         "patternProperties": {".*": {"type": ["string", "integer", "number", "array", "object"]}},
                         "properties": {"Id": {"type": "string"}, "ServiceTimeout": {"type": "integer"},
                                        "ServiceToken": {"type": "string"}}},
     objects(["Id", "ServiceTimeout", "ServiceToken", "Other", "", "x\ty"], ["t", 3, 2.5, None, True, [], {}], rng,
             n=100, base={"ServiceToken": "t"}))
# Two overlapping patterns, and the keys neither matches.
rng = random.Random(4)
case("two_patterns", {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "number", "minimum": 0}},
                      "additionalProperties": {"type": "string"}},
     objects(["ab", "a", "b", "ba", "c", "abb", "aXb", ""], [1, -1, "s", 2.5, 0, None], rng, n=80))
# A declared key a pattern matches must meet both schemas; a required key only a pattern gives.
rng = random.Random(5)
case("declared_and_pattern", {"type": "object", "required": ["b", "x-req"],
                              "properties": {"x-a": {"type": "string"}, "b": {"type": "integer"}},
                              "patternProperties": {"^x-": {"type": "string", "maxLength": 3}}},
     objects(["x-a", "b", "x-req", "x-b", "y"], ["abc", "abcd", 1, "", ["q"]], rng, n=120,
             extra=[{"b": 1, "x-req": "ab"}, {"b": 1, "x-req": "abcd"}, {"b": 1, "x-req": 5, "x-a": "ab"}],
             base={"b": 1, "x-req": "ab"}))
case("declared_number_meets_pattern_types", {"type": "object", "properties": {"n": {"type": "number"}},
                                             "patternProperties": {"^n": {"type": ["integer", "string"]}}},
     objects(["n", "nn", "m"], [1, 1.5, "s", None], random.Random(6), n=40))
# Compose's x- extensions beside closed declared keys.
case("compose_extensions", {"type": "object", "properties": {"image": {"type": "string"}},
                            "patternProperties": {"^x-": {}}, "additionalProperties": False},
     objects(["image", "x-", "x-a", "xa", "X-a", "ax-"], ["i", 1, {}], random.Random(7), n=40))
# Keys with JSON escapes, non-ASCII and the empty key against a character-class pattern.
case("class_pattern_keys", {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}},
                            "additionalProperties": {"type": "boolean"}},
     objects(["ab", "é", "a\"b", "a\\b", "", "A", "a1", "\u0001", "z"], [1, True, "s"], random.Random(8), n=40))

# unevaluatedProperties beside allOf / $ref (Compose's services and hooks, Meltano's plugins).
BASE = {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^x-": {}}}
EXTRA = {"type": "object", "properties": {"b": {"type": "integer"}}}
case("unevaluated_all_of", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                            "allOf": [{"$ref": "#/$defs/base"}, {"$ref": "#/$defs/extra"}],
                            "properties": {"c": {"type": "boolean"}}, "unevaluatedProperties": False,
                            "$defs": {"base": BASE, "extra": EXTRA}},
     objects(["c", "a", "b", "x-y", "d", "xa"], ["s", 1, True, None], random.Random(9), n=80))
case("unevaluated_ref_beside", {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "#/$defs/base",
                                "unevaluatedProperties": False, "$defs": {"base": BASE}},
     objects(["a", "x-1", "b", "c"], ["s", 1], random.Random(10), n=30))
case("unevaluated_schema", {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                            "properties": {"a": {"type": "string"}}, "unevaluatedProperties": {"type": "integer"}},
     objects(["a", "b", "c"], ["s", 1, 2.5], random.Random(11), n=30))
case("unevaluated_after_additional", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                      "allOf": [{"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}],
                                      "unevaluatedProperties": False},
     objects(["a", "b", "c"], ["s", 1], random.Random(12), n=30))

# A format beside a pattern (citation-file-format's date, ORCID and URL).
STRINGS_DATE = ["2024-02-29", "2023-02-29", "2024-13-01", "2024-1-01", "1900-02-29", "2000-02-29", "0000-01-01",
                "2024-04-31", "2024-04-30", "x2024-01-01", "2024-01-01x", ""]
case("date_and_pattern", {"type": "string", "format": "date",
                          "pattern": "^[0-9]{4}-(0[1-9]|1[012])-(0[1-9]|[12][0-9]|3[01])$"}, STRINGS_DATE)


def uri_not_in_question(doc, valid):
    return not valid or URI.fullmatch(doc) is not None


ORCID = ["https://orcid.org/0000-0002-1825-0097", "https://orcid.org/0000-0002-1825-009X",
         "http://orcid.org/0000-0002-1825-0097", "https://orcid.org/0000-0002-1825-009",
         "x:https://orcid.org/0000-0002-1825-0097?a", "https://orcid.org/0000-0002-1825-0097/ab",
         "https://orcid.org/0000-0002-1825-0097 x", "https://orcid.org/0000-0002-1825-00970", "orcid.org", ""]
case("orcid_uri_and_search", {"type": "string", "format": "uri",
                              "pattern": "https://orcid\\.org/[0-9]{4}-[0-9]{4}-[0-9]{4}-[0-9]{3}[0-9X]{1}"},
     ORCID, keep=uri_not_in_question)
URLS = ["https://example.com/a", "ftp://x", "sftp://h/p?q#f", "https://", "http://a b", "mailto:x", "https:/x",
        "httpx://y", "HTTPS://y", "http://%zz", "http://%41"]
case("url_uri_and_prefix", {"type": "string", "format": "uri", "pattern": "^(https|http|ftp|sftp)://.+"}, URLS,
     keep=uri_not_in_question)

# not {anyOf: [{pattern}, ...]} beside a pattern and maxLength (Buildkite's step keys: not a UUID, no {{matrix).
UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
KEYS = ["deploy", "a{{matrix}}", "{{matrix", "{matrix", "123e4567-e89b-12d3-a456-426614174000",
        "123e4567-e89b-12d3-a456-42661417400", "x123e4567-e89b-12d3-a456-426614174000", "a b", "", "$x:y"]
case("not_any_of_patterns", {"type": "string", "maxLength": 40, "pattern": "^[a-zA-Z0-9_\\-:${}]+$",
                             "not": {"anyOf": [{"pattern": UUID}, {"pattern": "\\{\\{matrix"}]}}, KEYS)


# format: regex: the part of Python's regex syntax the grammar writes (schema_strings.cpp's regex_format_rule).
PUNCT = ".^$*+?{}()|[]/-#&~%,:;<=>@_'! "
LITERALS = "ab-z09 ,/#é\"'"


def gen_regex(rng, depth=0):
    def escape(in_class):
        kind = rng.randrange(4)
        if kind == 0:
            return "\\" + rng.choice("dDsSwWntrfv" + ("" if in_class else "a"))
        if kind == 1:
            return "\\" + rng.choice(PUNCT + "\\")
        if kind == 2:
            return "\\x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(2))
        return "\\u" + "".join(rng.choice("0123456789abcdef") for _ in range(4))

    def class_item():
        kind = rng.randrange(3)
        if kind == 0:
            return rng.choice("ab09 ,/#é\"'.*+?{}()|$")
        if kind == 1:
            return escape(True)
        run = rng.choice(["0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
        i = rng.randrange(len(run))
        return run[i] + "-" + run[rng.randrange(i, len(run))]

    def quantifier():
        q = rng.choice(["*", "+", "?", "{%d}" % rng.randrange(100), "{%d,}" % rng.randrange(10)])
        if rng.random() < 0.3:
            m = rng.randrange(10)
            q = "{%d,%d}" % (m, rng.randrange(m, 10))
        return q + ("?" if rng.random() < 0.3 else "")

    def piece():
        kind = rng.randrange(7)
        if kind == 0:
            return rng.choice(["^", "$", "\\b", "\\B", "\\A", "\\Z"])
        if kind == 1 and depth < 4:
            return "(?" + rng.choice("=!") + gen_regex(rng, depth + 1) + ")"
        if kind == 2 and depth < 4:
            atom = "(" + rng.choice(["", "?:"]) + gen_regex(rng, depth + 1) + ")"
        elif kind == 3:
            atom = "[" + rng.choice(["", "^"]) + "".join(class_item() for _ in range(rng.randrange(1, 4))) + "]"
        elif kind == 4:
            atom = escape(False)
        else:
            atom = rng.choice(LITERALS + ".")
        return atom + (quantifier() if rng.random() < 0.4 else "")

    branches = ["".join(piece() for _ in range(rng.randrange(0, 4))) for _ in range(rng.choice([1, 1, 2, 3]))]
    return "|".join(branches)


rng = random.Random(13)
for _ in range(20000):
    r = gen_regex(rng)
    re.compile(r)  # every regex of the part the grammar writes compiles
WRITTEN = [gen_regex(rng) for _ in range(120)]
BROKEN = ["(", ")", "a**", "*a", "[z-a]", "\\q", "a{3,2}", "[", "\\", "^*", "(?<=a+)b", "a{1,2}{3}", "(?P<n>a)(?P<n>b)",
          "\\1", "(a)\\2", "[a-]]", "x|*", "(?z)", "\\x4", "\\u12", "[\\d-z]", "(?:", "a(?=b", "??", "$+", "\\b*"]
OUTSIDE = ["(a)\\1", "(?P<n>a)", "(?i)a", "(?<=a)b", "\\0", "a*+", "[[a]", "a{,3}", "[a-]", "\\N{DIGIT ONE}"]
MUTANTS = []
for r in WRITTEN[:60]:
    if r:
        i = rng.randrange(len(r))
        MUTANTS += [r[:i] + r[i + 1:], r[:i] + rng.choice("()[]{}*+?\\|^$") + r[i:]]
IN_PART = set(WRITTEN)


def regex_kept(doc, valid):
    # Valid regexes the grammar does not write (see OUTSIDE) are left out;
    # the generated ones are kept whatever the verdict (all valid).
    return doc in IN_PART or not valid


case("format_regex", {"type": "string", "format": "regex"}, WRITTEN + BROKEN + OUTSIDE + MUTANTS, keep=regex_kept)
assert all(c["valid"] for c in CASES[-1]["candidates"] if json.loads(c["text"]) in IN_PART)

judged_goldens.write(OUT, "tools/oracle/keys_and_formats_goldens.py", CASES, ensure_ascii=False)
