"""Goldens for oneOf, allOf and conditions in the shapes of the schema
corpus (bench/schema_corpus.py) that the converter makes exact: oneOf
branches that look alike but are disjoint (nested oneOfs, propertyNames
that forbid the other branch's keys, `not {enum}` against a const, required
keys beside the object's own schemas), and allOf with several if/then/else,
`not`s, nested allOf and additionalProperties in one branch. For each schema,
candidate documents (keys in the order the schema declares them, as the
grammar writes objects) and `jsonschema`'s verdict (Draft 2020-12);
tests/grammar/schema_combinators_test.cpp checks that the grammar accepts
exactly the valid ones, and the masks against the matcher.

  python3 tools/oracle/schema_combinator_goldens.py   # writes tests/grammar/golden/schema_combinators.json
"""
import json
import os

import jsonschema

from judged_goldens import write

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "schema_combinators.json")

# Travis' env: a oneOf whose first branch is (through $refs) a oneOf of a
# string, a closed object and an array; {} matches two closed objects.
ENV = {
    "$defs": {
        "envVar": {"oneOf": [{"type": "string", "pattern": "[^=]+=.*"},
                             {"type": "object", "additionalProperties": False,
                              "properties": {"secure": {"type": "string"}}}]},
        "envVars": {"oneOf": [{"$ref": "#/$defs/envVar"}, {"type": "array", "items": {"$ref": "#/$defs/envVar"}}]},
    },
    "oneOf": [{"$ref": "#/$defs/envVars"},
              {"type": "object", "additionalProperties": False,
               "properties": {"global": {"$ref": "#/$defs/envVars"}, "jobs": {"$ref": "#/$defs/envVars"}}}],
}
ENV_DOCS = ['{}', '"A=1"', '"A"', '{"secure": "x"}', '{"global": "A=1"}', '{"global": "A=1", "secure": "x"}',
            '{"jobs": ["A=1", {"secure": "s"}]}', '{"jobs": {}}', '["A=1", {}]', '[]', '[{"global": "A=1"}]',
            '{"global": {"secure": "x"}, "jobs": []}', '{"other": 1}', '1', 'null']

# Snapcraft: a oneOf of two oneOfs, one of objects that require "base"
# (told apart by its const), one of closed objects without it.
SNAP = {
    "$defs": {
        "A": {"type": "object", "additionalProperties": False, "required": ["name", "base"],
              "properties": {"name": {"type": "string"}, "base": {"const": "core22"}}},
        "B": {"type": "object", "additionalProperties": False, "required": ["name", "base", "build-base"],
              "properties": {"name": {"type": "string"}, "base": {"const": "bare"},
                             "build-base": {"enum": ["core22", "core24"]}}},
        "C": {"type": "object", "additionalProperties": False, "required": ["name", "build-base"],
              "properties": {"name": {"type": "string"}, "build-base": {"enum": ["core24", "devel"]}}},
    },
    "oneOf": [{"discriminator": {"propertyName": "base"},
               "oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
              {"oneOf": [{"$ref": "#/$defs/C"}]}],
}
SNAP_DOCS = ['{"name": "x", "base": "core22"}', '{"name": "x", "base": "bare", "build-base": "core24"}',
             '{"name": "x", "build-base": "devel"}', '{"name": "x", "base": "core22", "build-base": "core24"}',
             '{"name": "x", "base": "bare"}', '{"name": "x", "build-base": "core22"}', '{"name": "x"}', '{}']

# CircleCI's steps: one open object whose propertyNames refuse the keys
# the other (closed, minProperties 1) branch is made of.
STEP = {
    "oneOf": [
        {"type": "string"},
        {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z_]*$", "not": {"pattern": "^(when|unless)$"}},
         "minProperties": 1, "maxProperties": 1, "additionalProperties": {"type": ["object", "string"]}},
        {"type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
         "properties": {"when": {"type": "string"}, "unless": {"type": "string"}}},
    ]
}
STEP_DOCS = ['"checkout"', '{"run": "make"}', '{"run": {}}', '{"when": "x"}', '{"unless": "y"}', '{"when": {}}',
             '{}', '{"run": "a", "when": "b"}', '{"Run": "x"}', '{"whenever": "x"}', '{"run": 1}', '[]']

# Travis' deployments: a provider const against a string that is none of them.
DEPLOY = {
    "type": "object",
    "oneOf": [
        {"properties": {"provider": {"const": "script"}, "script": {"type": "string"}},
         "required": ["provider", "script"]},
        {"properties": {"provider": {"const": "npm"}, "email": {"type": "string"}}, "required": ["provider"]},
        {"properties": {"provider": {"type": "string", "not": {"enum": ["script", "npm"]}}},
         "required": ["provider"]},
    ],
}
DEPLOY_DOCS = ['{"provider": "script", "script": "x"}', '{"provider": "script"}', '{"provider": "npm"}',
               '{"provider": "npm", "email": 1}', '{"provider": "heroku"}', '{"provider": "heroku", "script": 1}',
               '{"provider": "npmx"}', '{"provider": ""}', '{}', '{"provider": 1}']

# Dependabot's updates: exactly one of two keys, each branch repeating the
# schema the object declares for it; and a condition beside it.
UPDATE = {
    "type": "object", "additionalProperties": False,
    "properties": {"directory": {"type": "string"}, "directories": {"type": "array", "items": {"type": "string"}},
                   "schedule": {"type": "string"}, "group": {"type": "string"}},
    "allOf": [
        {"if": {"not": {"properties": {"group": {}}, "required": ["group"]}}, "then": {"required": ["schedule"]}},
        {"oneOf": [{"properties": {"directory": {"$ref": "#/properties/directory"}}, "required": ["directory"]},
                   {"properties": {"directories": {"$ref": "#/properties/directories"}},
                    "required": ["directories"]}]},
    ],
}
UPDATE_DOCS = ['{"directory": "/", "schedule": "daily"}', '{"directories": ["/"], "schedule": "daily"}',
               '{"directory": "/", "directories": [], "schedule": "daily"}', '{"schedule": "daily"}',
               '{"directory": "/"}', '{"directory": "/", "group": "g"}', '{"directories": [1], "schedule": "x"}',
               '{"directory": 1, "group": "g"}', '{"group": "g"}']

# GitHub workflows' steps: exactly one of uses/run/wait (properties true),
# beside dependentRequired and a closed object.
WORKFLOW_STEP = {
    "type": "object", "additionalProperties": False,
    "properties": {"uses": {"type": "string"}, "run": {"type": "string"}, "wait": {"type": "boolean"},
                   "shell": {"type": "string"}, "name": {"type": "string"}},
    "dependentRequired": {"shell": ["run"]},
    "oneOf": [{"type": "object", "properties": {"uses": True}, "required": ["uses"]},
              {"type": "object", "properties": {"run": True}, "required": ["run"]},
              {"type": "object", "properties": {"wait": True}, "required": ["wait"]}],
}
WORKFLOW_STEP_DOCS = ['{"uses": "a"}', '{"run": "b", "shell": "sh"}', '{"wait": true, "name": "n"}',
                      '{"uses": "a", "run": "b"}', '{"shell": "sh", "uses": "a"}', '{"name": "n"}',
                      '{"run": 1}', '{"wait": true, "run": "x", "uses": "y"}', '{"run": "b", "other": 1}']

# GitHub issue forms: several if/then across allOf, one per value of "type".
FORM_ITEM = {
    "$defs": {"type": {"type": "string", "enum": ["markdown", "input", "dropdown"]}},
    "type": "object", "required": ["type"], "properties": {"type": {"$ref": "#/$defs/type"}},
    "allOf": [
        {"if": {"properties": {"type": {"const": "markdown"}}},
         "then": {"required": ["type", "attributes"], "additionalProperties": False,
                  "properties": {"type": {"$ref": "#/$defs/type"},
                                 "attributes": {"type": "object", "required": ["value"],
                                                "properties": {"value": {"type": "string", "minLength": 1}},
                                                "additionalProperties": False}}}},
        {"if": {"properties": {"type": {"const": "input"}}},
         "then": {"required": ["type", "attributes"], "additionalProperties": False,
                  "properties": {"type": {"$ref": "#/$defs/type"}, "id": {"type": "string"},
                                 "attributes": {"type": "object", "required": ["label"],
                                                "properties": {"label": {"type": "string"}},
                                                "additionalProperties": False}}}},
    ],
}
FORM_ITEM_DOCS = ['{"type": "markdown", "attributes": {"value": "hi"}}', '{"type": "markdown", "attributes": {}}',
                  '{"type": "markdown", "attributes": {"value": "hi"}, "id": "x"}',
                  '{"type": "input", "id": "x", "attributes": {"label": "L"}}', '{"type": "input"}',
                  '{"type": "input", "attributes": {"label": "L", "value": "v"}}', '{"type": "dropdown"}',
                  '{"type": "dropdown", "anything": [1]}', '{"type": "other"}', '{}']

# GitHub workflows' pull_request: not both of each pair, in allOf branches.
PULL_REQUEST = {
    "allOf": [
        {"type": "object", "additionalProperties": False,
         "properties": {"branches": {"type": "array"}, "branches-ignore": {"type": "array"},
                        "paths": {"type": "array"}, "paths-ignore": {"type": "array"}}},
        {"not": {"type": "object", "required": ["branches", "branches-ignore"]}},
        {"not": {"type": "object", "required": ["paths", "paths-ignore"]}},
    ]
}
PULL_REQUEST_DOCS = ['{}', '{"branches": []}', '{"branches": [], "branches-ignore": []}', '{"branches": [], "paths": []}',
                     '{"paths": [], "paths-ignore": [], "branches": []}', '{"branches-ignore": [], "paths-ignore": []}',
                     '{"tags": []}', '[]']

# GitLab's inputs: a $ref and nested allOf of conditions, `if {not
# {required}}`, and `then {not {anyOf: [required, required]}}`.
INPUT = {
    "$defs": {"base": {"type": "object", "properties": {"type": {"enum": ["string", "number"]},
                                                       "default": {}, "options": {"type": "array"}}}},
    "allOf": [
        {"$ref": "#/$defs/base"},
        {"properties": {"rules": {"type": "array"}}},
        {"if": {"required": ["rules"]}, "then": {"not": {"anyOf": [{"required": ["options"]},
                                                                    {"required": ["default"]}]}}},
        {"allOf": [{"if": {"properties": {"type": {"enum": ["string"]}}, "required": ["type"]},
                    "then": {"properties": {"default": {"type": "string"}}}},
                   {"if": {"properties": {"type": {"enum": ["number"]}}, "required": ["type"]},
                    "then": {"properties": {"default": {"type": "number"}}}},
                   {"if": {"not": {"required": ["type"]}}, "then": {"properties": {"default": {"type": "string"}}}}]},
    ]
}
INPUT_DOCS = ['{}', '{"type": "string", "default": "x"}', '{"type": "string", "default": 1}',
              '{"type": "number", "default": 1}', '{"type": "number", "default": "x"}', '{"default": "x"}',
              '{"default": 2}', '{"rules": []}', '{"rules": [], "options": []}', '{"rules": [], "default": "x"}',
              '{"type": "number", "rules": []}', '{"type": "boolean"}', '{"other": true}']

# Woodpecker's steps: else with anyOf of required keys.
COMMANDS_STEP = {
    "type": "object", "additionalProperties": False, "required": ["image"],
    "properties": {"image": {"type": "string"}, "detach": {"type": "boolean"},
                   "commands": {"type": "array", "items": {"type": "string"}}, "entrypoint": {"type": "string"}},
    "allOf": [{"if": {"properties": {"detach": {"const": True}}}, "then": {},
               "else": {"anyOf": [{"required": ["commands"]}, {"required": ["entrypoint"]}]}}],
}
COMMANDS_STEP_DOCS = ['{"image": "a", "detach": true}', '{"image": "a"}', '{"image": "a", "commands": ["x"]}',
                      '{"image": "a", "detach": false, "entrypoint": "e"}', '{"image": "a", "detach": false}',
                      '{"commands": ["x"]}', '{"image": "a", "commands": ["x"], "entrypoint": "e"}',
                      '{"image": "a", "detach": true, "other": 1}']

# additionalProperties in one allOf branch applies to keys the others declare.
CLOSED_BRANCH = {
    "allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
              {"properties": {"b": {"type": "string"}}}]
}
CLOSED_BRANCH_DOCS = ['{}', '{"a": 1}', '{"b": "x"}', '{"a": 1, "b": "x"}', '{"a": "x"}']
TYPED_REST = {
    "allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
              {"properties": {"b": {"maxLength": 2}}, "required": ["b"]}]
}
TYPED_REST_DOCS = ['{"b": "xy"}', '{"b": "xyz"}', '{"b": 1}', '{"a": 1, "b": ""}', '{"a": 1}', '{"b": "x", "c": "z"}',
                   '{"b": "x", "c": 3}']

# anyOf beside `required`: each branch keeps the object's own required keys.
ANY_OF_REQUIRED = {
    "type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}},
    "anyOf": [{"required": ["b"]}, {"required": ["c"]}],
}
ANY_OF_REQUIRED_DOCS = ['{"a": 1, "b": 2}', '{"a": 1, "c": 2}', '{"b": 2}', '{"c": 1}', '{"a": 1}',
                        '{"a": "x", "b": 1}', '{"a": 1, "b": 1, "c": 1}']

# $ref branches beside the object's own keywords: both apply.
REF_SIBLINGS = {
    "$defs": {"A": {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}},
              "B": {"type": "object", "required": ["y"], "properties": {"y": {"type": "string"}},
                    "additionalProperties": False}},
    "type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
    "anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}],
}
REF_SIBLINGS_DOCS = ['{"kind": "k", "x": 1}', '{"x": 1}', '{"kind": "k", "y": "s"}', '{"kind": 1, "x": 1}',
                     '{"kind": "k", "x": "s"}', '{"kind": "k"}']

# Several `not {pattern}` in allOf are one: no pattern finds a match.
BRANCH_NAME = {"type": "string", "minLength": 1,
               "allOf": [{"not": {"pattern": "[ ~^:]"}}, {"not": {"pattern": "\\.\\."}}, {"not": {"pattern": "@\\{"}}]}
BRANCH_NAME_DOCS = ['"main"', '"a b"', '"a..b"', '"a.b"', '"x@{y"', '"x@y"', '""', '"feature/x~1"']

# Dependabot: else constrains the items of an array the object declares.
BETA = {
    "$defs": {"update": {"type": "object", "required": ["eco"], "additionalProperties": False,
                         "properties": {"eco": {"enum": ["npm", "pip", "beta"]}, "dir": {"type": "string"}}}},
    "type": "object", "required": ["updates"],
    "properties": {"beta": {"type": "boolean"}, "updates": {"type": "array", "items": {"$ref": "#/$defs/update"}}},
    "if": {"properties": {"beta": {"const": True}}, "required": ["beta"]},
    "then": {},
    "else": {"properties": {"updates": {"type": "array", "items": {"type": "object",
                                                                   "properties": {"eco": {"enum": ["npm", "pip"]}}}}}},
}
BETA_DOCS = ['{"updates": [{"eco": "npm"}]}', '{"updates": [{"eco": "beta"}]}', '{"beta": true, "updates": [{"eco": "beta"}]}',
             '{"beta": false, "updates": [{"eco": "beta", "dir": "/"}]}', '{"beta": false, "updates": [{"eco": "pip", "dir": "/"}]}',
             '{"updates": [{"dir": "/"}]}', '{"updates": []}', '{"beta": true}']

# GitHub's workflow jobs (timeouts required): open objects, one requiring
# runs-on and a valid timeout, the other uses. An object with all three
# matches both, unless its timeout is invalid: a case split on which keys are
# present and whether the timeout matches (its complement: not a number and
# not a string the pattern finds a match in).
JOBS = {
    "$defs": {"expr": {"type": "string", "pattern": "^\\$\\{\\{.*\\}\\}$"}},
    "oneOf": [{"type": "object", "additionalProperties": True, "required": ["runs-on", "timeout"],
               "properties": {"timeout": {"oneOf": [{"type": "number"}, {"$ref": "#/$defs/expr"}]}}},
              {"type": "object", "required": ["uses"]}],
}
JOBS_DOCS = ['{"timeout": 5, "runs-on": "x"}', '{"timeout": "${{ a }}", "runs-on": "x"}', '{"timeout": "abc", "runs-on": "x"}',
             '{"uses": "u"}', '{"timeout": 5, "runs-on": "x", "uses": "u"}', '{"timeout": "abc", "runs-on": "x", "uses": "u"}',
             '{"timeout": true, "uses": "u"}', '{"timeout": null, "runs-on": "x", "uses": "u"}',
             '{"timeout": [], "runs-on": "x", "uses": "u"}', '{"timeout": "${{ b }}", "runs-on": "x", "uses": "u"}',
             '{"runs-on": "x"}', '{"runs-on": "x", "uses": "u"}', '{}', '"x"']

# Travis' npm deployments: exactly one of two keys whose values may be a
# string or a closed object; an invalid value makes a branch fail (the
# complement of a closed object: a key outside it, or a value outside a
# key's schema).
NPM = {
    "$defs": {"secret": {"oneOf": [{"type": "string"},
                                   {"type": "object", "additionalProperties": False,
                                    "properties": {"secure": {"type": "string"}}}]}},
    "type": "object", "required": ["provider"], "properties": {"provider": {"const": "npm"}},
    "oneOf": [{"properties": {"api_key": {"$ref": "#/$defs/secret"}}, "required": ["api_key"]},
              {"properties": {"api_token": {"$ref": "#/$defs/secret"}}, "required": ["api_token"]}],
}
NPM_DOCS = ['{"provider": "npm", "api_key": "k"}', '{"provider": "npm", "api_token": {"secure": "s"}}',
            '{"provider": "npm", "api_key": "k", "api_token": "t"}', '{"provider": "npm", "api_key": "k", "api_token": 1}',
            '{"provider": "npm", "api_key": {"secure": 1}, "api_token": "t"}',
            '{"provider": "npm", "api_key": {"x": 1}, "api_token": {}}', '{"provider": "npm", "api_key": {}, "api_token": {}}',
            '{"provider": "npm", "api_key": {"secure": "s", "x": 2}, "api_token": {"secure": "t"}}',
            '{"provider": "npm", "api_key": null, "api_token": []}', '{"provider": "npm"}', '{"provider": "npm", "api_key": 1}']

# GitHub's reusable workflow secrets: a oneOf (an object, or a string with
# an expression) beside the value "inherit", which the pattern finds no
# match in.
SECRETS = {
    "$defs": {"env": {"oneOf": [{"type": "object", "additionalProperties": {"type": ["string", "number"]}},
                                {"type": "string", "pattern": "^.*\\$\\{\\{(.|[\r\n])*\\}\\}.*$"}]}},
    "oneOf": [{"$ref": "#/$defs/env"}, {"type": "string", "enum": ["inherit"]}],
}
SECRETS_DOCS = ['"inherit"', '"${{ secrets }}"', '"a ${{ b }} c"', '"x"', '"inherit ${{ x }}"', '{}', '{"a": "b"}',
                '{"a": true}', '1']

# Readthedocs' install list: an item with method "uv" must be alone
# (if {contains} then {maxItems: 1}): no item is a uv one, or one item is.
INSTALL = {
    "type": "array",
    "items": {"anyOf": [
        {"type": "object", "additionalProperties": False, "required": ["req"],
         "properties": {"req": {"type": "string"}, "method": {"enum": ["pip", "setuptools"]}}},
        {"type": "object", "additionalProperties": False, "required": ["method"],
         "properties": {"method": {"enum": ["uv"]}, "cmd": {"type": "string"}}}]},
    "allOf": [{"if": {"contains": {"type": "object", "properties": {"method": {"const": "uv"}}, "required": ["method"]}},
               "then": {"minItems": 1, "maxItems": 1}}],
}
# (An item of the list without a uv item declares method before req: the
# test's keys come first in the merged item, as a parent's before a branch's.)
INSTALL_DOCS = ['[]', '[{"req": "a"}]', '[{"req": "a"}, {"method": "pip", "req": "b"}]', '[{"method": "uv"}]',
                '[{"method": "uv", "cmd": "x"}]', '[{"method": "uv", "cmd": "x"}, {"req": "a"}]',
                '[{"req": "a"}, {"method": "uv"}]', '[{"method": "uv"}, {"method": "uv"}]',
                '[{"req": "a", "method": "uv"}]', '[1]', '{}']

CASES = [
    ("array_if_contains", INSTALL, INSTALL_DOCS),
    ("one_of_value_split", JOBS, JOBS_DOCS),
    ("one_of_value_vs_pattern", SECRETS, SECRETS_DOCS),
    ("one_of_closed_complement", NPM, NPM_DOCS),
    ("one_of_nested", ENV, ENV_DOCS),
    ("one_of_of_one_ofs", SNAP, SNAP_DOCS),
    ("one_of_property_names", STEP, STEP_DOCS),
    ("one_of_not_enum", DEPLOY, DEPLOY_DOCS),
    ("one_of_required_declared", UPDATE, UPDATE_DOCS),
    ("one_of_required_true", WORKFLOW_STEP, WORKFLOW_STEP_DOCS),
    ("all_of_ifs", FORM_ITEM, FORM_ITEM_DOCS),
    ("all_of_nots", PULL_REQUEST, PULL_REQUEST_DOCS),
    ("nested_all_of_conditions", INPUT, INPUT_DOCS),
    ("else_any_of", COMMANDS_STEP, COMMANDS_STEP_DOCS),
    ("all_of_closed_branch", CLOSED_BRANCH, CLOSED_BRANCH_DOCS),
    ("all_of_typed_rest", TYPED_REST, TYPED_REST_DOCS),
    ("any_of_keeps_required", ANY_OF_REQUIRED, ANY_OF_REQUIRED_DOCS),
    ("ref_branches_and_siblings", REF_SIBLINGS, REF_SIBLINGS_DOCS),
    ("all_of_not_patterns", BRANCH_NAME, BRANCH_NAME_DOCS),
    ("else_items", BETA, BETA_DOCS),
]


def main():
    cases = []
    for name, schema, docs in CASES:
        validator = jsonschema.Draft202012Validator(schema)
        rows = [{"text": text, "valid": validator.is_valid(json.loads(text))} for text in docs]
        cases.append({"name": name, "schema": schema, "candidates": rows})
    write(OUT, "tools/oracle/schema_combinator_goldens.py", cases)


if __name__ == "__main__":
    main()
