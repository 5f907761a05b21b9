"""Goldens for the JSON Schema keywords that xgrammar ignores or
approximates (minProperties/maxProperties, multipleOf, patternProperties,
propertyNames, fixed-length formats with minLength/maxLength, not,
dependentRequired/dependentSchemas/dependencies, if/then/else, oneOf, uniqueItems over a small set of
values): for each
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

class Raw(str):
    """A candidate given as JSON text (to test spellings json.dumps never writes, like 0.50)."""


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "schema_keywords.json")

CASES = [
    # Keywords beside $ref apply from 2019-09 on (and with no $schema, read as 2020-12);
    # drafts 4-7 ignore them.
    ("ref_siblings_apply",
     {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 3},
     ["", "ab", "abc", "abcd", 5]),
    ("ref_siblings_ignored_draft07",
     {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"s": {"type": "string"}},
      "$ref": "#/definitions/s", "maxLength": 3},
     ["", "abc", "abcd", 5]),
    ("ref_siblings_object",
     {"$defs": {"o": {"type": "object", "properties": {"a": {"type": "integer"}}}},
      "type": "object", "properties": {"p": {"$ref": "#/$defs/o", "required": ["a"],
                                               "properties": {"b": {"type": "string"}}}},
      "required": ["p"], "additionalProperties": False},
     [{"p": {}}, {"p": {"a": 1}}, {"p": {"a": 1, "b": "x"}}, {"p": {"a": 1, "b": 2}}, {"p": {"b": "x"}},
      {"p": {"a": "1"}}]),
    ("ref_siblings_dependent_required",
     {"$defs": {"o": {"type": "object"}}, "$ref": "#/$defs/o", "dependentRequired": {"a": ["b"]}},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 1}, {"c": 1}, [], "a"]),
    ("ref_siblings_unique_items",
     {"$defs": {"a": {"type": "array"}}, "$ref": "#/$defs/a", "uniqueItems": True},
     [[], [1, 2], [1, 1], ["a", "a"], ["a", "b"], [[1], [1]], [{"x": 1}, {"x": 1}], [1, 1.0], "s"]),
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
    ("number_fractional_bounds", {"type": "number", "minimum": 0.5, "maximum": 2.25},
     [0.5, 0.6, 1, 2, 2.25, 2.2499, 0.4999, 0.49, 2.26, 2.2501, 3, -1, 0, 10.5,
      Raw("0.50"), Raw("2.2500"), Raw("2.25000001"), Raw("1.0"), Raw("0.4999999999")]),
    ("number_fractional_exclusive", {"type": "number", "exclusiveMinimum": -1.5, "exclusiveMaximum": 0.125},
     [-1.5, -1.4999, -1, -0.5, 0, 0.1, 0.124, 0.1249999, 0.125, 0.1251, -1.51, -2, 1,
      Raw("-0"), Raw("-0.0"), Raw("0.1250"), Raw("-1.50")]),
    ("number_fractional_negative_range", {"type": "number", "minimum": -3.75, "maximum": -0.01},
     [-3.75, -3.7, -1, -0.01, -0.011, -0.009, 0, -3.76, -4, 0.01]),
    ("number_fractional_min_only", {"type": "number", "exclusiveMinimum": 99.9},
     [99.91, 100, 12345, 99.9, 99.89, 9.99, -100]),
    ("integer_fractional_bounds", {"type": "integer", "minimum": 1.5, "maximum": 4.5}, [1, 2, 3, 4, 5, 0]),
    ("pattern_class_with_lengths", {"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 2, "maxLength": 4},
     ["ab", "a_9", "abcd", "a", "abcde", "", "AB", "a-b"]),
    ("pattern_counted_with_max", {"type": "string", "pattern": "^\\d{2,}$", "maxLength": 3},
     ["12", "123", "1", "1234", "ab"]),
    ("pattern_literal_with_min", {"type": "string", "pattern": "^x*$", "minLength": 1}, ["x", "xxx", "", "xy"]),
    ("pattern_sequence_with_lengths", {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "minLength": 3, "maxLength": 6},
     ["abc", "a-1", "abcdef", "ab", "abcdefg", "1bc", "aBc", "a", "z-----"]),
    ("pattern_prefix_search_with_max", {"type": "string", "pattern": "^arn:", "maxLength": 8},
     ["arn:", "arn:aws", "arn:abcd", "arn:abcde", "arm:x", "xarn:", "ar"]),
    ("pattern_fixed_length_fits", {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$", "minLength": 1, "maxLength": 64},
     ["2024-05", "2024-5", "20245-05", "abcd-ef"]),
    ("pattern_suffix_search_with_min", {"type": "string", "pattern": "[0-9]$", "minLength": 3},
     ["ab1", "1", "abc", "x9yz", "999", "xy9"]),
    ("pattern_group_around_all_with_max", {"type": "string", "pattern": "^([a-z0-9]+)$", "maxLength": 4},
     ["ab", "a1b2", "a1b2c", "", "AB"]),
    ("pattern_optional_search_with_max", {"type": "string", "pattern": "[-a-z]*", "maxLength": 5},
     ["", "ABC!", "abcde", "abcdef", "1 2 3"]),
    ("pattern_repeated_search_with_min", {"type": "string", "pattern": "^x+", "minLength": 3},
     ["xab", "x", "xxx", "abc", "xxxxa", "ax"]),
    ("format_uuid_with_length",
     {"type": "string", "format": "uuid", "minLength": 36, "maxLength": 36},
     ["123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400", "not-a-uuid"]),
    ("format_date_with_length", {"type": "string", "format": "date", "maxLength": 10},
     ["2024-02-29", "2024-13-01", "24-01-01"]),
    # Real calendar dates (xgrammar admits any day 01-31 of any month):
    # month lengths, Feb 29 in leap years only (2000 yes, 1900 no), no year 0.
    ("format_date_calendar", {"type": "string", "format": "date"},
     ["2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2100-02-29", "2400-02-29", "0004-02-29",
      "1996-02-29", "1998-02-29", "2023-02-28", "2023-02-30", "2024-04-30", "2024-04-31", "2024-06-31",
      "2024-09-31", "2024-11-31", "2024-01-31", "2024-03-31", "2024-05-31", "2024-07-31", "2024-08-31",
      "2024-10-31", "2024-12-31", "2024-12-32", "0000-01-01", "0001-01-01", "9999-12-31", "2024-00-10",
      "2024-01-00", "1976-02-29", "1974-02-29", "1800-02-29", "1600-02-29"]),
    ("format_date_time_calendar", {"type": "string", "format": "date-time"},
     ["2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z", "2024-04-31T00:00:00+02:00", "2024-04-30T23:59:59.5Z",
      "1900-02-29T01:02:03Z", "2000-02-29T01:02:03-05:30"]),
    # not: the forms a grammar says exactly (the rest are refused).
    ("not_type_null", {"not": {"type": "null"}}, [None, 1, "a", [], {}, True, 2.5]),
    ("not_type_beside_types", {"type": ["string", "integer", "null"], "not": {"type": ["integer", "null"]}},
     ["a", 1, None, 2.5]),
    ("not_number_takes_integer", {"type": ["number", "boolean"], "not": {"type": "number"}}, [1, 2.5, True]),
    ("not_type_filters_enum", {"enum": ["a", 1, None, [1]], "not": {"type": "string"}}, ["a", 1, None, [1], "b"]),
    ("not_enum_beside_enum", {"enum": ["red", "green", "blue"], "not": {"enum": ["green"]}},
     ["red", "green", "blue", "pink"]),
    ("not_const_string", {"type": "string", "not": {"const": "admin"}},
     ["admin", "admi", "admins", "", "Admin", Raw('"adm\\u0069n"'), Raw('"\\/admin"'), "x"]),
    ("not_enum_strings_with_escapes", {"type": "string", "not": {"enum": ["a\"b", "c/d", "tab\there", "", "x"]}},
     ["a\"b", Raw('"a\\"b"'), "c/d", Raw('"c\\/d"'), "tab\there", Raw('"tab\\there"'), "", "x", "xy", "a\"",
      "c/", "tab", "y", "\\"]),
    ("not_inside_properties", {"type": "object", "properties": {"role": {"type": "string", "not": {"enum": ["root", "admin"]}}},
                               "required": ["role"], "additionalProperties": False},
     [{"role": "root"}, {"role": "admin"}, {"role": "user"}, {"role": "roots"}, {"role": 1}]),
    ("not_beside_any_of", {"anyOf": [{"type": "string"}, {"type": "integer"}], "not": {"const": "none"}},
     ["none", "some", 1, None]),
    # A format JSON Schema does not define asserts nothing (validators ignore it).
    ("format_undefined_is_annotation",
     {"type": "object", "properties": {"n": {"type": "string", "format": "int64"}, "b": {"type": "string", "format": "byte"}},
      "additionalProperties": False},
     [{"n": "123", "b": "QUJD"}, {"n": "abc"}, {"n": 5}, {"b": "!!"}, {"b": None}]),
    # Conditional object keywords (schema_conditionals.cpp: case splits).
    # Candidates list keys in declaration order (the grammar's order).
    ("dependent_required",
     {"type": "object", "properties": {"name": {"type": "string"}, "card": {"type": "string"}, "billing": {"type": "string"}},
      "dependentRequired": {"card": ["billing"]}, "additionalProperties": False},
     [{}, {"name": "a"}, {"card": "1"}, {"card": "1", "billing": "x"}, {"billing": "x"},
      {"name": "a", "card": "1", "billing": "x"}, {"name": "a", "card": "1"}, {"card": 1, "billing": "x"}]),
    ("dependent_required_undeclared_open",
     {"type": "object", "properties": {"a": {"type": "integer"}}, "dependentRequired": {"a": ["b"]},
      "additionalProperties": True},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": "x"}, {"c": 1}, {"a": 1, "c": 2}, {"a": 1, "b": [], "c": 3}]),
    ("dependent_required_two_triggers",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
      "dependentRequired": {"a": ["b"], "b": ["c"]}, "additionalProperties": False},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"b": 2}, {"b": 2, "c": 3}, {"c": 3}, {"a": 1, "c": 3}]),
    ("dependent_schemas",
     {"type": "object", "properties": {"kind": {"type": "string"}, "credit_card": {"type": "integer"},
                                       "billing_address": {"type": "string"}},
      "dependentSchemas": {"credit_card": {"required": ["billing_address"],
                                           "properties": {"kind": {"enum": ["visa", "amex", 5]}}}},
      "additionalProperties": False},
     [{}, {"kind": "x"}, {"credit_card": 1}, {"credit_card": 1, "billing_address": "here"},
      {"kind": "visa", "credit_card": 1, "billing_address": "here"}, {"kind": "x", "credit_card": 1, "billing_address": "here"},
      {"kind": "x", "billing_address": "here"}, {"kind": 5, "credit_card": 1, "billing_address": "h"}]),
    ("dependent_schemas_declares_property",
     {"type": "object", "properties": {"a": {"type": "string"}}, "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
      "additionalProperties": True},
     [{}, {"a": "x"}, {"a": "x", "b": 1}, {"a": "x", "b": "s"}, {"b": "s"}, {"b": 1}, {"a": 2}]),
    ("draft7_dependencies",
     {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "dependencies": {"a": ["b"], "c": {"properties": {"a": {"const": 1}}, "required": ["a"]}}, "additionalProperties": False},
     [{}, {"a": 1}, {"a": 1, "b": "x"}, {"b": "x"}, {"c": True}, {"a": 1, "b": "x", "c": True},
      {"a": 2, "b": "x", "c": True}, {"a": 2, "b": "x"}, {"b": "x", "c": False}]),
    ("if_then_else_discriminator",
     {"type": "object", "properties": {"kind": {"enum": ["circle", "square"]}, "radius": {"type": "number"},
                                       "side": {"type": "number"}},
      "required": ["kind"], "if": {"properties": {"kind": {"const": "circle"}}}, "then": {"required": ["radius"]},
      "else": {"required": ["side"]}, "additionalProperties": False},
     [{"kind": "circle", "radius": 1}, {"kind": "circle"}, {"kind": "square", "side": 2}, {"kind": "square", "radius": 1},
      {"kind": "square", "radius": 1, "side": 2}, {"kind": "circle", "side": 2}, {"kind": "circle", "radius": 1, "side": 2},
      {"kind": "triangle", "side": 1}, {}]),
    ("if_then_else_string_not_required",
     {"type": "object", "properties": {"country": {"type": "string"}, "postal_code": {"type": "string"}},
      "if": {"properties": {"country": {"const": "US"}}},
      "then": {"properties": {"postal_code": {"pattern": "^[0-9]{5}$"}}},
      "else": {"properties": {"postal_code": {"pattern": "^[A-Z][0-9][A-Z] [0-9][A-Z][0-9]$"}}},
      "additionalProperties": False},
     [{"country": "US", "postal_code": "12345"}, {"country": "US", "postal_code": "K1A 0B1"},
      {"country": "CA", "postal_code": "K1A 0B1"}, {"country": "CA", "postal_code": "12345"},
      {"postal_code": "12345"}, {"postal_code": "K1A 0B1"}, {"country": "USA"}, {"country": "US"}, {"country": "U"},
      {"country": "", "postal_code": "K1A 0B1"}, {}]),
    ("if_required_then_required",
     {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "integer"}},
      "if": {"required": ["a"]}, "then": {"required": ["b"]}, "additionalProperties": False},
     [{}, {"a": True}, {"a": True, "b": 1}, {"b": 1}, {"a": 1, "b": 1}]),
    ("if_const_true_then_else_properties",
     {"type": "object", "properties": {"enabled": {"type": "boolean"}, "port": {"type": "integer"}},
      "required": ["enabled"],
      "if": {"properties": {"enabled": {"const": True}}, "required": ["enabled"]},
      "then": {"required": ["port"], "properties": {"port": {"minimum": 1, "maximum": 65535}}},
      "else": {"properties": {"port": False}}, "additionalProperties": False},
     [{"enabled": True, "port": 80}, {"enabled": True}, {"enabled": True, "port": 0}, {"enabled": False},
      {"enabled": False, "port": 80}, {"port": 80}, {"enabled": True, "port": 65536}]),
    # oneOf whose branches are proven disjoint (schema_one_of.cpp): their union, exactly.
    ("one_of_by_type", {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
     ["a", 1, None, 1.5, True, [], {}]),
    ("one_of_by_values", {"oneOf": [{"enum": [1, 2]}, {"enum": [3, "x"]}, {"type": "boolean"}]},
     [1, 2, 3, "x", True, 4, "y", None]),
    ("one_of_discriminator",
     {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                 "required": ["kind", "x"], "additionalProperties": False},
                {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
                 "required": ["kind", "y"], "additionalProperties": False}]},
     [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}, {"kind": "a", "y": "s"}, {"kind": "b", "x": 1}, {"kind": "c", "x": 1},
      {"x": 1}]),
    ("one_of_required_vs_forbidden",
     {"type": "object",
      "oneOf": [{"properties": {"url": {"type": "string"}}, "required": ["url"], "additionalProperties": False},
                {"properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}]},
     [{"url": "u"}, {"path": "p"}, {}, {"url": 1}]),
    # A type that two branches admit whole leaves every branch (oneOf rejects all its values):
    # Kubernetes' Quantity and IntOrString.
    ("one_of_shared_null", {"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]},
     ["a", 1, 1.5, None, True, [], {}]),
    ("one_of_shared_null_and_string",
     {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null", "string"], "minimum": 2},
                {"type": "boolean"}, {"type": "null"}]},
     ["a", 1, 2, None, True, 1.5]),
    ("one_of_shared_only_the_constrained_rest",
     {"oneOf": [{"type": ["string", "null"], "maxLength": 2}, {"type": ["null", "array"], "maxItems": 1}]},
     ["ab", "abc", None, [], [1], [1, 2], 0]),
    # oneOf of `required` lists (CloudFormation): exactly one list all present (schema_one_of.cpp shapes).
    ("one_of_required_lists",
     {"type": "object", "properties": {"Amount": {"type": "number"}, "Ratio": {"type": "number"}},
      "additionalProperties": False, "oneOf": [{"required": ["Amount"]}, {"required": ["Ratio"]}]},
     [{}, {"Amount": 1}, {"Ratio": 0.5}, {"Amount": 1, "Ratio": 0.5}, {"Amount": "x"}, {"Other": 1}]),
    ("one_of_required_overlapping_lists",
     {"type": "object", "properties": {"op": {"type": "string"}, "a": {"type": "integer"}, "b": {"type": "integer"},
                                       "c": {"type": "integer"}},
      "required": ["op"], "additionalProperties": False,
      "oneOf": [{"required": ["op", "a"]}, {"required": ["op", "b"]}, {"required": ["a", "c"]}]},
     [{"op": "x"}, {"op": "x", "a": 1}, {"op": "x", "b": 1}, {"op": "x", "c": 1}, {"op": "x", "a": 1, "b": 2},
      {"op": "x", "a": 1, "c": 2}, {"op": "x", "b": 1, "c": 2}, {"a": 1, "c": 2}, {"op": "x", "a": 1, "b": 1, "c": 1}]),
    ("one_of_required_open_object",
     {"type": "object", "oneOf": [{"required": ["url"]}, {"required": ["path", "root"]}]},
     [{}, {"url": 1}, {"path": "p"}, {"path": "p", "root": "r"}, {"url": 1, "path": "p"},
      {"url": 1, "path": "p", "root": "r"}, {"url": "u", "other": 1}]),
    # oneOf of closed objects without required keys (Buildkite, Bitbucket): {} and objects of
    # shared keys only match several; each branch keeps objects with a key the others lack.
    ("one_of_closed_objects",
     {"oneOf": [{"enum": ["simple", "other"]},
                {"type": "object", "properties": {"email": {"type": "string"}, "if": {"type": "string"}},
                 "additionalProperties": False},
                {"type": "object", "properties": {"slack": {"type": "string"}, "if": {"type": "string"}},
                 "additionalProperties": False},
                {"type": "object", "properties": {"step": {"type": "integer"}}, "additionalProperties": False}]},
     ["simple", "x", {}, {"if": "a"}, {"email": "e"}, {"email": "e", "if": "a"}, {"slack": "s"},
      {"email": "e", "slack": "s"}, {"step": 1}, {"step": "1"}, {"step": 1, "if": "a"}, {"slack": 1}]),
    ("one_of_closed_objects_nested_keys",
     {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "additionalProperties": False}]},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"b": "x"}]),
    # Patterns are searches, per top-level branch (schema_strings.cpp search_pattern), keys too.
    ("pattern_properties_search",
     {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"x-a": 1}, {"x-": 2}, {"x-b": 1, "x-": 3}, {"ax-": 1}, {"X-a": 1}, {"x-a": "s"}]),
    # JSON Schema's reading (strict=false): keys the pattern does not match take any value.
    ("pattern_properties_open_class", {"type": "object", "patternProperties": {"[a-z]": {"type": "integer"}}},
     [{}, {"ab": 1}, {"ab": "s"}, {"1a": 2}, {"1a": "s"}, {"12": "s"}, {"-": None, "x": 3}, {"": [1]}],
     {"strict": False}),
    ("pattern_properties_open_any_character", {"type": "object", "patternProperties": {".": {"type": "string"}}},
     [{}, {"a": "s"}, {"a": 1}, {"": 1}, {"": "s", "b": "t"}, {"": 1, "b": 2}], {"strict": False}),
    ("pattern_properties_open_every_key", {"type": "object", "patternProperties": {".*": {"type": "integer"}}},
     [{}, {"ab": 1}, {"ab": "s"}, {"": 2}, {"": None}], {"strict": False}),
    ("pattern_branches_anchored_apart", {"type": "string", "pattern": "^[a-z]$|^[0-9]{2}$"},
     ["a", "ab", "12", "123", "1", "", "a12"]),
    ("pattern_branches_prefix_or_suffix", {"type": "string", "pattern": "^ab|cd$"},
     ["ab", "abx", "xab", "cd", "xcd", "cdx", "abcd", "x"]),
    ("unique_items_enum",
     {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c", 3]}, "uniqueItems": True},
     [[], ["a"], ["a", "b"], ["c", "b", "a"], ["a", "a"], ["a", "b", "a"], [3], ["d"], ["a", "b", "c", "a"]]),
    ("unique_items_bounds",
     {"type": "array", "items": {"enum": ["x", "y", "z", None]}, "uniqueItems": True, "minItems": 2, "maxItems": 3},
     [[], ["x"], ["x", "y"], ["y", "x", None], ["x", "y", "z", None], ["x", "x"], [None, "z"], ["z", None, "z"]]),
    ("unique_items_boolean", {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
     [[], [True], [False, True], [True, True], [True, False, True], [1]]),
    ("unique_items_equal_numbers", {"type": "array", "items": {"enum": [1, 1.0, 2]}, "uniqueItems": True},
     [Raw("[1]"), Raw("[1.0]"), Raw("[1, 2]"), Raw("[1.0, 2]"), Raw("[1, 1.0]"), Raw("[2, 1, 1]"), Raw("[3]")]),
    ("unique_items_ref_const",
     {"type": "array", "items": {"$ref": "#/$defs/only"}, "uniqueItems": True, "$defs": {"only": {"const": "k"}}},
     [[], ["k"], ["k", "k"], ["j"]]),
    ("unique_items_not_array_type", {"type": "string", "uniqueItems": True, "maxLength": 2}, ["ab", "abc", 1]),
]


def main():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    out = {"tool": f"jsonschema {importlib.metadata.version('jsonschema')} (Draft 2020-12 unless the schema's "
                   "$schema names another, format checker)",
           "separators": "json.dumps defaults: ', ' and ': '", "cases": []}
    for name, schema, docs, *options in CASES:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=checker)
        candidates = []
        for d in docs:
            text = str(d) if isinstance(d, Raw) else json.dumps(d)
            candidates.append({"text": text, "valid": validator.is_valid(json.loads(text))})
        assert any(c["valid"] for c in candidates) and not all(c["valid"] for c in candidates), name
        case = {"name": name, "schema": schema, "candidates": candidates}
        if options:
            case["options"] = options[0]  # SchemaOptions fields (default: strict)
        out["cases"].append(case)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out['cases'])} schemas, {sum(len(c['candidates']) for c in out['cases'])} candidates")


if __name__ == "__main__":
    main()
