"""Goldens for the formats `uri-reference` and `duration`, `propertyNames`
beside `properties`/`required`, `not {allOf: [object tests]}` (CircleCI's
workflows) and if/then/else beside a type list of object and other types
(GitLab's artifacts: `["object", "null"]`), two patterns in allOf,
`not {pattern}` beside a format, and oneOf branches told apart by a key
one of them requires (GitLab's `when: delayed`).

Each candidate is judged by `jsonschema` with its format checker. That
checker tests uri-reference only with rfc3987 or rfc3986-validator
installed, and duration only with isoduration (which needs arrow); without
them both formats pass every string. This script installs them into a
scratch folder (FORMAT_CHECKERS, default /tmp/format_checkers; pip
--no-deps, pinned) and puts it on sys.path, so the verdicts are those of a
judge that checks the formats. uri-reference candidates are also put to
both rfc3987 and rfc3986-validator directly: the script stops if the two
disagree on one (the grammar writes their common language). Left out:
  - strings ending in a newline (both validators' regexes end in Python's
    `$`, which also matches before a final newline; the grammar does not
    write such a string);
  - durations on which the checker raises instead of answering (an
    exponent past Decimal's range: decimal.Overflow, which jsonschema does
    not catch).
tests/grammar/formats_and_names_test.cpp checks that the grammar accepts
exactly the valid ones and that its masks are exact.

  python3 tools/oracle/formats_and_names_goldens.py   # writes tests/grammar/golden/formats_and_names.json
"""
import json
import os
import random
import subprocess
import sys

CHECKERS = os.environ.get("FORMAT_CHECKERS", "/tmp/format_checkers")
PINS = ["isoduration==20.11.0", "arrow==1.4.0", "rfc3986-validator==0.1.1", "rfc3987==1.3.8"]
if not os.path.isdir(os.path.join(CHECKERS, "isoduration")):
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--break-system-packages", "--no-deps",
                    "--target", CHECKERS] + PINS, check=True)
sys.path.insert(0, CHECKERS)

import jsonschema  # noqa: E402
import rfc3986_validator  # noqa: E402
import rfc3987  # noqa: E402

import judged_goldens  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "formats_and_names.json")
CASES = []
D2020 = "https://json-schema.org/draft/2020-12/schema"
assert "duration" in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers, "isoduration did not load"
assert "uri-reference" in jsonschema.Draft7Validator.FORMAT_CHECKER.checkers, "no uri-reference checker"


def verdict(validator, doc):
    try:
        return validator.is_valid(doc)
    except ArithmeticError:  # decimal.Overflow inside isoduration: no answer
        return None


def strings_in(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from strings_in(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings_in(v)


def case(name, schema, docs):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    out, seen = [], set()
    for d in docs:
        text = json.dumps(d, ensure_ascii=False)
        if text in seen or any(s.endswith("\n") for s in strings_in(d)):
            continue
        ok = verdict(v, d)
        if ok is None:
            continue
        seen.add(text)
        out.append({"text": text, "valid": ok})
    assert any(c["valid"] for c in out) and any(not c["valid"] for c in out), name
    CASES.append({"name": name, "schema": schema, "candidates": out})


rng = random.Random(20261207)


def random_strings(alphabet, n, lo, hi, prefix=""):
    return [prefix + "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


# ---- duration ---------------------------------------------------------------

DURATIONS = ["P1D", "P1Y", "P1M", "P1W", "PT1H", "PT1M", "PT1S", "P1Y2M3DT4H5M6S", "P1Y2M3D", "PT4H5M6S", "P0Y1W",
             "P0.0Y0M0D2W", "P-0Y1W", "P1Y1W", "P1D1W", "P1D2T1H", "P1,5T1H", "P1T1H", "PT", "P", "", "P1DT",
             "PT1H2", "P1D2", "P2020-01-01T00:00:00", "P1e2D", "P1E+2D", "P1e-3D", "-P1D", "+P1D", "P1,5D", "P.5D",
             "P5.D", "P.D", "P,D", "P1.5.5D", "P1e2e3D", "P+-1D", "PT1.5S", "PT1,5H30M", "P1M1Y", "P1DT1S1M",
             "PT1H1H", "P1Y2M3D4W", "PPT1H", "P1d", "p1D", "P1Dx", "xP1D", "P 1D", "P1D ", "P1DT1HT1M", "PT1D",
             "P1WT1H", "P0DT0S", "P00Y00M00D1W", "P1Y.T1H", "P1Y,T1H", "P1YeT1H", "P,T1H", "P.T1H", "P1.T1H",
             "P1,T1H", "P+,-T1H", "P-1,5T1S", "P1e99999D", "P12345678901234567890123456789012345D", "PT0S",
             "P1Y2M", "P3W", "PT36H", "P0.5Y", "P1YT", "P-1D", "--P1D", "-PT1M", "P1Y1M1D1W", "P0Y0M1W", "P0M1W",
             "P1M0W", "P0.000e5Y1W", "P.0Y1W", "P0.Y1W", "P0,Y1W"]
DURATIONS += random_strings("PTYMDWHS0123.,e+-", 500, 1, 9, prefix="P")
DURATIONS += random_strings("PTYMDWHS0123.,eE+-x", 200, 1, 10)
case("duration", {"$schema": D2020, "type": "string", "format": "duration"}, DURATIONS)
case("duration_in_an_object", {"$schema": D2020, "type": "object", "properties": {
    "timeout": {"type": "string", "format": "duration"}, "n": {"type": "integer"}}, "required": ["timeout"]},
    [{"timeout": d} for d in DURATIONS[:80]] + [{"timeout": "PT5M", "n": 3}, {"n": 3}, {"timeout": 5}])
# Draft 7 does not define duration: jsonschema leaves it unchecked there.
case("duration_under_draft_07", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                 "properties": {"t": {"type": "string", "format": "duration"}},
                                 "additionalProperties": False},
     [{"t": d} for d in DURATIONS[:40]] + [{"t": 5}, {"u": "P1D"}])

# ---- uri-reference ------------------------------------------------------------

URI_REFS = ["", "a", ".yaml", "../a/b?c#d", "/abs/path", "//host", "//host:80/p", "//user:pw@host/p", "http://x",
            "https://example.com/a?b=c#d", "mailto:a@b", "a:b", "a:b:c", "1a:b", "+a:b", "a+b.c-d:e", ":a", "a b",
            "a%20b", "a%2", "a%zz", "%", "?q", "#f", "#f#g", "a#b?c", "[::1]", "//[::1]/", "//[::1]:8080",
            "//[v1.x]", "//[v1.]", "//[1:2:3:4:5:6:7:8]", "//[1:2:3:4:5:6:7:8:9]", "//[1::8]", "//[::]",
            "//[::ffff:1.2.3.4]", "//[::ffff:01.002.3.4]", "//[::ffff:256.1.1.1]", "//[1:2:3:4:5:6:1.2.3.4]",
            "//[1:2:3:4:5:6:7::]", "//[1:2:3:4:5:6::7]", "//[1::2::3]", "//[:::]", "//[12345::]", "//[g::]",
            "//host[1]", "http://[::1]x", "a/b:c", "./a:b", "a@b", "@", "//@", "//a@b@c", "x://a:b:c",
            "http://a:8x", "http://a:", "http:", "http:/", "http:///", "é", "a\"b", "a\\b", "a<b>", "a{b}",
            "a|b", "a^b", "a`b", "a b#c", "http://ex ample.com", "urn:isbn:0451450523", "tel:+1-816-555-1212",
            "file:///etc/hosts", "data:text/plain;base64,SGVsbG8=", "a?b?c/d", "a#b/c?d", "~user", "!$&'()*+,;=",
            "-._~", "//host/%41", "v1.x", "//v1.x", "HTTP://EXAMPLE.COM"]
URI_ALPHABET = "ab:/?#[]@!$&'()*+,;=-._~%0F1 \"<é\\v"
URI_REFS += random_strings(URI_ALPHABET, 400, 0, 10)
URI_REFS += random_strings("0123456789abcdefABCDEF:.[]/", 200, 1, 16, prefix="//[")
for s in URI_REFS:
    a = bool(rfc3986_validator.validate_rfc3986(s, rule="URI_reference"))
    try:
        rfc3987.parse(s, rule="URI_reference")
        b = True
    except ValueError:
        b = False
    assert a == b, f"rfc3986-validator and rfc3987 disagree on {s!r}: {a} vs {b}"
case("uri_reference", {"type": "string", "format": "uri-reference"}, URI_REFS)
case("uri_reference_in_an_array", {"type": "array", "items": {"type": "string", "format": "uri-reference"}},
     [[s] for s in URI_REFS[:60]] + [[], ["a", "b c"], ["a", "//h/p"]])
# GitLab's includes: a uri-reference the pattern finds a match in (the format's DFA times the pattern's).
YAML_REFS = [s + suffix for s in URI_REFS[:120] for suffix in ("", ".yml", "/a.yaml")] + [
    "a b.yml", ".yml", "x.yaml#f", "x.yml?q", "//[::1]/a.yml", "//[::1/a.yml", "é.yml", "%zz.yml", "a.yml\n"]
case("uri_reference_beside_a_pattern", {"type": "string", "format": "uri-reference", "pattern": "\\.ya?ml$"},
     YAML_REFS)
# Draft 4 does not define uri-reference: unchecked there.
case("uri_reference_under_draft_04", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                                      "properties": {"u": {"type": "string", "format": "uri-reference"}},
                                      "additionalProperties": False},
     [{"u": s} for s in URI_REFS[:40]] + [{"u": 1}, {"v": "a"}])

# ---- propertyNames beside properties / required ----------------------------------

NAME_VALUES = [1, "s", None, {}]
NAME_KEYS = ["version", "build", "Build", "b-1", "", "a b", "when", "unless", "run", "x/y", "é", "a\"b", "1a",
             "a" * 12, "deploy_2", "-"]


def keyed(keys, rng, base=None, n=60):
    docs = [{}] + [dict(base or {}, **{k: v}) for k in keys for v in NAME_VALUES]
    for _ in range(n):
        d = dict(base or {})
        for k in rng.sample(keys, rng.randint(1, 3)):
            d[k] = rng.choice(NAME_VALUES)
        docs.append(d)
    return docs


def declared_first(docs, declared):
    """Members in the grammar's order: declared keys in declaration order, then the others."""
    return [{k: d[k] for k in sorted(d, key=lambda k: declared.index(k) if k in declared else len(declared))}
            if isinstance(d, dict) else d for d in docs]


# CircleCI's workflows: a declared key beside keys of any non-empty name.
WORKFLOWS = {"type": "object", "properties": {"version": {"type": ["number", "string"]}},
             "propertyNames": {"pattern": ".+"}, "additionalProperties": {"type": "object"}}
case("names_any_nonempty_beside_a_declared_key", WORKFLOWS,
     declared_first(keyed(NAME_KEYS, rng) + [{"version": 2, "w": {}}, {"w": {}, "": {}}, {"version": "x", "": {}}]
                    + [{"build": {"jobs": []}}, {"version": 2.1, "build": {}, "deploy": {}}], ["version"]))
# CircleCI's steps: one key of a pattern, never when/unless, some declared.
STEP = {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z\\d/_-]*$", "not": {"pattern": "^(when|unless)$"}},
        "minProperties": 1, "maxProperties": 1,
        "properties": {"run": {"type": "string"}, "when": {"type": "string"}, "Save": {"type": "string"}}}
case("names_pattern_and_not_pattern_beside_declared_keys", STEP,
     declared_first(keyed(NAME_KEYS + ["Save", "save", "x-y_z/1", "whenever"], rng), ["run", "when", "Save"]))
# Declared keys the names refuse, a required one the names admit, an enum of names.
ENUM_NAMES = {"type": "object", "properties": {"a": {"type": "integer"}, "zz": {"type": "string"}},
              "required": ["a"], "propertyNames": {"enum": ["a", "b", "c"]}}
case("names_enum_beside_declared_keys", ENUM_NAMES,
     declared_first(keyed(["a", "b", "c", "d", "zz"], rng, base={"a": 1}) + [{"b": 1}], ["a", "zz"]))
LENGTHS = {"type": "object", "properties": {"id": {"type": "string"}, "identifier": {"type": "string"}},
           "propertyNames": {"maxLength": 3, "minLength": 2}, "additionalProperties": {"type": "integer"}}
case("names_length_bounds_beside_declared_keys", LENGTHS,
     declared_first(keyed(["id", "identifier", "ab", "abc", "abcd", "a", "é1", "ééé", "éééé"], rng),
                    ["id", "identifier"]))
REQUIRED_UNDECLARED = {"type": "object", "required": ["x-a"], "propertyNames": {"pattern": "^x-"},
                       "additionalProperties": {"type": "integer"}}
case("names_pattern_beside_a_required_key", REQUIRED_UNDECLARED,
     declared_first(keyed(["x-a", "x-b", "y", "X-a", "x-"], rng, base={"x-a": 1}) + [{"y": 1}], ["x-a"]))

# ---- not {allOf: [object tests]} ---------------------------------------------------

# CircleCI's workflows: `when` and `unless` not both.
WORKFLOW = {"type": "object", "properties": {"when": {"type": "string"}, "unless": {"type": "string"},
                                             "jobs": {"type": "array"}},
            "required": ["jobs"], "not": {"allOf": [{"required": ["when"]}, {"required": ["unless"]}]}}
case("not_all_of_required", WORKFLOW,
     declared_first(keyed(["when", "unless", "jobs", "other"], rng, base={"jobs": []}) + [{"when": "a"}],
                    ["when", "unless", "jobs"]))
NOT_BOTH_VALUES = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "integer"}},
                   "not": {"allOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]},
                                     {"type": "object", "required": ["b"]}]}}
case("not_all_of_object_tests", NOT_BOTH_VALUES,
     declared_first([{}, {"a": 1}, {"a": 2}, {"b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 3}, {"a": 2, "b": "x"},
                     {"c": 1}, {"a": 1, "c": 1}, {"a": 1, "b": 2, "c": 3}], ["a", "b"]))

# ---- two patterns, a not {pattern} beside a format ---------------------------------------

# GitLab's include: a YAML uri-reference, remote only over http(s).
INCLUDE = {"type": "string", "format": "uri-reference", "pattern": "\\w\\.ya?ml$",
           "anyOf": [{"pattern": "^https?://"}, {"not": {"pattern": "^\\w+://"}}]}
INCLUDES = ["a.yml", "a.yaml", ".yml", "x/a.yml", "https://h/a.yml", "http://h/a.yaml", "ftp://h/a.yml",
            "s3://b/a.yml", "https://h/a.json", "a b.yml", "//h/a.yml", "c:a.yml", "c://a.yml", "é.yml", "_.yml",
            "a.yml?x", "https://h/a.yml#f", "a.ymlx", "HTTPS://h/a.yml", "https:/h/a.yml", "a.yml\n", ""]
case("gitlab_include_string", INCLUDE, INCLUDES + [s + "/b.yml" for s in URI_REFS[:60]])
TWO_PATTERNS = {"type": "string", "allOf": [{"pattern": "^a"}, {"pattern": "b$"}, {"maxLength": 4}]}
case("all_of_two_patterns", TWO_PATTERNS, ["ab", "a", "b", "axb", "axxb", "axxxb", "ba", "", "aab", "abab", "a\nb"])

# ---- oneOf told apart by a key one branch requires -----------------------------------------

# GitLab's jobs: `when: delayed` needs `start_in`; any other `when` (or none) is the other branch.
DELAYED = {"type": "object", "additionalProperties": False,
           "properties": {"when": {"enum": ["delayed", "manual", "always"]}, "start_in": {"type": "string"},
                          "script": {"type": "string"}},
           "oneOf": [{"properties": {"when": {"enum": ["delayed"]}}, "required": ["when", "start_in"]},
                     {"properties": {"when": {"not": {"enum": ["delayed"]}}}}]}
case("one_of_required_key_with_disjoint_values", DELAYED,
     declared_first([{}, {"when": "delayed"}, {"when": "delayed", "start_in": "1h"}, {"when": "manual"},
                     {"when": "manual", "start_in": "1h"}, {"start_in": "1h"}, {"script": "x"},
                     {"when": "always", "script": "x"}, {"when": "delayed", "start_in": "1h", "script": "x"},
                     {"when": "never"}, {"when": "delayed", "start_in": 1}, {"other": 1}],
                    ["when", "start_in", "script"]))

# ---- format: regex beside a pattern of literals around .+ -----------------------------------

# GitLab's coverage: a regex between slashes. Valid candidates are regexes of the part the grammar
# writes (docs/grammar.md, "format: regex") between the slashes; other valid ones (never written:
# "/\\/", whose last slash an escape takes, or regexes outside the part) are left out.
IN_PART = ["a", "a|b", "(a)+", "[a-z]*", "\\d{2,3}", "^a$", "(?=a)a", "a*?", "|", "a|", "Code coverage: \\d+\\.\\d+",
           "(?:x|y){1,3}z", "[^/]+", "\\bword\\b", "\\/", "é", "(a(b(c)))", "\\\\"]
NOT_REGEX = ["(", ")", "a(", "[a", "a{2,1}", "(?<=a+)b"]
COVERAGE = {"type": "string", "format": "regex", "pattern": "^/.+/$"}
for r in IN_PART:
    import re as _re
    _re.compile("/" + r + "/")
case("regex_format_between_slashes", COVERAGE,
     ["/" + r + "/" for r in IN_PART + NOT_REGEX] + ["//", "/", "a", "/a", "a/", "x/a/", "/a/x", "/a\nb/", ""])

# ---- case-insensitive patterns: (?i) --------------------------------------------------------

# Python's re folds ASCII letters and, for s, k and i, the non-ASCII letters U+017F, U+212A, U+0130 and
# U+0131. CloudFormation's hook alias (its (?i) sits inside the lookahead there, which Python 3.11
# refuses; at the start all readings agree).
CASE_ALPHABET = "aAsSſkKKiIİıwW0é-:"
CASE_STRINGS = ["", "aws", "AWS", "Aws", "awſ", "abc", "ABC", "sſS", "KK", "İı", "é", "É", "a-b", "x::y::z",
                "Aws::Foo::Bar", "MyCo::Foo::Bar", "aWs1::b2::c3", "ab::cd::ef"]
CASE_STRINGS += random_strings(CASE_ALPHABET, 200, 0, 6)
CASE_STRINGS += [a + "::" + b + "::" + c for a, b, c in zip(random_strings("awsAWSſkK0", 40, 1, 5),
                                                          random_strings("awsAWSſkK0", 40, 2, 4),
                                                          random_strings("awsAWSſkK0", 40, 2, 4))]
for name, pattern in [("case_insensitive_class", "(?i)^[a-z]+$"), ("case_insensitive_prefix", "(?i)^aws"),
                      ("case_insensitive_negated_class", "(?i)^[^s:]+$"),
                      ("case_insensitive_hook_alias", "(?i)^(?!aws)[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}$"),
                      # CloudFormation's own form, ^(?!(?i)aws)..., read to the group's end (PCRE's, Java's
                      # reading) is this; formats_and_names_test.cpp compiles that form against these verdicts.
                      ("case_insensitive_group", "^(?!(?i:aws))[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}$")]:
    case(name, {"type": "string", "pattern": pattern}, CASE_STRINGS)

# ---- \p{Print} ------------------------------------------------------------------------

# CloudFormation's host key description. Python's re has no \p; the grammar reads Java's POSIX class,
# printable ASCII: formats_and_names_test.cpp compiles ^[\p{Print}]*$ against these verdicts of [ -~].
PRINTABLE = ["", "abc", "a b", "~", " ", "\t", "\n", "é", "a\u007f", "Host key #1 (rsa)", "\u00a0", "x" * 200,
             "x" * 201, "\"", "\\", "日本"]
case("print_class_as_ascii", {"type": "string", "pattern": "^[ -~]*$", "maxLength": 200}, PRINTABLE)

# ---- conditions beside a type list of object and other types ---------------------------

# GitLab's artifacts: an object or null; `public` not beside `access`.
ARTIFACTS = {"type": ["object", "null"], "additionalProperties": False,
             "if": {"type": "object", "required": ["access"]}, "then": {"not": {"required": ["public"]}},
             "properties": {"name": {"type": "string"}, "access": {"type": "string", "enum": ["none", "all"]},
                            "public": {"type": "boolean"}}}
OBJECT_OR_NULL = [None, 1, "x", [], {}, {"name": "a"}, {"access": "all"}, {"public": True},
                  {"access": "none", "public": False}, {"name": "a", "access": "all"}, {"name": "a", "public": False},
                  {"access": "x"}, {"other": 1}, {"name": "a", "access": "none", "public": True}]
case("if_beside_object_or_null", ARTIFACTS, declared_first(OBJECT_OR_NULL, ["name", "access", "public"]))
# An `if` that holds on null (required is vacuous there): its `then` decides.
HOLDS_ON_NULL = {"type": ["object", "null", "string"], "if": {"required": ["access"]},
                 "then": {"type": ["object", "string"], "required": ["name"]},
                 "properties": {"name": {"type": "string"}, "access": {"type": "string"}}}
case("if_holds_on_null_and_strings", HOLDS_ON_NULL,
     declared_first(OBJECT_OR_NULL + ["", "abc", True], ["name", "access", "public"]))

judged_goldens.write(OUT, "tools/oracle/formats_and_names_goldens.py", CASES, ensure_ascii=False)
