#!/usr/bin/env python3
"""Writes tests/server/structured_schemas.json: >= 200 JSON schemas of
real-world shape for the structured-output validity run
(tests/server/structured_validity.py).

Families: tool/function parameter schemas (the shape agent clients send),
API payloads (users, orders, payments, events), nested objects, recursive
schemas ($ref/$defs: trees, comment threads, filter expressions), and the
keyword mix the grammar engine supports (enum, const, anyOf/oneOf, allOf,
nullable type lists, prefixItems, min/maxItems, min/maxLength, pattern,
format, numeric bounds). Strings and arrays mostly carry maxLength /
maxItems as OpenAPI specs usually do, so a 135M model finishes them within
a small max_tokens budget. `pattern`/`format` never come with
min/maxLength here: the grammar engine rejects that combination (named, a
400 under strict). Deterministic (seeded); every schema is checked
with jsonschema's Draft 2020-12 metaschema before it is written.

Run: python3 tools/oracle/structured_schemas.py
"""
import importlib.metadata
import json
import os
import random

import jsonschema

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "server", "structured_schemas.json")
SEED = 20261129


def s(max_len=16, **kw):
    return {"type": "string", "maxLength": max_len, **kw}


# Field templates: (property name, schema).
FIELDS = [
    ("name", s(20)), ("title", s(30)), ("city", s(20)), ("country", {"type": "string", "pattern": "^[A-Z]{2}$"}),
    ("email", {"type": "string", "format": "email"}),
    ("id", {"type": "string", "format": "uuid"}),
    ("created_at", {"type": "string", "format": "date-time"}),
    ("date", {"type": "string", "format": "date"}),
    ("start_time", {"type": "string", "format": "time"}),
    ("ip", {"type": "string", "format": "ipv4"}),
    ("website", {"type": "string", "format": "uri"}),
    ("age", {"type": "integer", "minimum": 0, "maximum": 130}),
    ("quantity", {"type": "integer", "minimum": 1, "maximum": 99}),
    ("count", {"type": "integer", "minimum": 0, "maximum": 1000}),
    ("year", {"type": "integer", "minimum": 1900, "maximum": 2100}),
    ("price", {"type": "number", "minimum": 0, "maximum": 10000}),
    ("score", {"type": "number"}),
    ("active", {"type": "boolean"}),
    ("verified", {"type": "boolean"}),
    ("status", {"type": "string", "enum": ["pending", "active", "done", "failed"]}),
    ("priority", {"enum": ["low", "medium", "high"]}),
    ("unit", {"enum": ["celsius", "fahrenheit"]}),
    ("currency", {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]}),
    ("role", {"type": "string", "enum": ["admin", "user", "guest"]}),
    ("tags", {"type": "array", "items": s(12), "maxItems": 3}),
    ("scores", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100}, "minItems": 1, "maxItems": 4}),
    ("nickname", {"type": ["string", "null"], "maxLength": 16}),
    ("middle_name", {"anyOf": [s(12), {"type": "null"}]}),
    ("rating", {"type": "integer", "minimum": 1, "maximum": 5}),
    ("description", s(40)),
    ("sku", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}),
    ("phone", {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}),
    ("zip", {"type": "string", "pattern": "^[0-9]{5}$"}),
    ("version", {"type": "string", "pattern": "^[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,3}$"}),
    ("kind", {"const": "event"}),
    ("coordinates", {"type": "array", "prefixItems": [{"type": "number", "minimum": -90, "maximum": 90},
                                                       {"type": "number", "minimum": -180, "maximum": 180}],
                     "items": False, "minItems": 2, "maxItems": 2}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 50}),
    ("query", s(30)),
    ("language", {"enum": ["en", "fr", "de", "es", "ja"]}),
    ("confidence", {"type": "number", "minimum": 0, "maximum": 1}),
    ("weight_kg", {"type": ["number", "null"], "minimum": 0, "maximum": 500}),
]

ADDRESS = {"type": "object", "properties": {"street": s(30), "city": s(20), "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                                            "country": s(2, minLength=2)},
           "required": ["street", "city", "country"], "additionalProperties": False}
MONEY = {"type": "object", "properties": {"amount": {"type": "number", "minimum": 0, "maximum": 100000},
                                          "currency": {"enum": ["USD", "EUR", "GBP"]}},
         "required": ["amount", "currency"], "additionalProperties": False}
LINE_ITEM = {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                              "quantity": {"type": "integer", "minimum": 1, "maximum": 20},
                                              "unit_price": {"type": "number", "minimum": 0, "maximum": 1000}},
             "required": ["sku", "quantity"], "additionalProperties": False}
NESTED = [("address", ADDRESS), ("total", MONEY), ("items", {"type": "array", "items": LINE_ITEM, "minItems": 1, "maxItems": 3}),
          ("owner", {"type": "object", "properties": {"name": s(20), "email": {"type": "string", "format": "email"}},
                     "required": ["name"], "additionalProperties": False}),
          ("location", {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                                        "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                        "required": ["lat", "lon"], "additionalProperties": False})]

TOOL_NAMES = ["get_weather", "search_web", "create_event", "send_email", "lookup_order", "book_flight", "translate_text",
              "get_stock_price", "create_ticket", "query_database", "set_reminder", "resize_image", "convert_currency",
              "find_restaurant", "schedule_meeting", "update_profile", "list_files", "run_sql", "fetch_url", "rate_item"]

RECURSIVE = [
    ("tree", {"$defs": {"node": {"type": "object", "properties": {"name": s(12), "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                                 "required": ["name"], "additionalProperties": False}}, "$ref": "#/$defs/node"}),
    ("comment_thread", {"$defs": {"comment": {"type": "object", "properties": {"author": s(12), "text": s(30),
                                                                             "replies": {"type": "array", "items": {"$ref": "#/$defs/comment"}, "maxItems": 2}},
                                              "required": ["author", "text"], "additionalProperties": False}},
                        "type": "object", "properties": {"thread": {"$ref": "#/$defs/comment"}}, "required": ["thread"], "additionalProperties": False}),
    ("filter_expression", {"$defs": {"expr": {"anyOf": [
        {"type": "object", "properties": {"field": s(12), "op": {"enum": ["eq", "lt", "gt"]}, "value": {"type": ["string", "number"], "maxLength": 12}},
         "required": ["field", "op", "value"], "additionalProperties": False},
        {"type": "object", "properties": {"and": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 1, "maxItems": 2}},
         "required": ["and"], "additionalProperties": False}]}}, "$ref": "#/$defs/expr"}),
    ("linked_list", {"definitions": {"cell": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99},
                                                                             "next": {"anyOf": [{"$ref": "#/definitions/cell"}, {"type": "null"}]}},
                                              "required": ["value", "next"], "additionalProperties": False}},
                     "$ref": "#/definitions/cell"}),
    ("org_chart", {"$defs": {"employee": {"type": "object", "properties": {"name": s(16), "title": s(16),
                                                                          "reports": {"type": "array", "items": {"$ref": "#/$defs/employee"}, "maxItems": 2}},
                                          "required": ["name", "title"], "additionalProperties": False}},
                   "$ref": "#/$defs/employee"}),
]


def obj(props, required, extra=False):
    return {"type": "object", "properties": dict(props), "required": required, "additionalProperties": extra}


def random_object(rng, n_min=2, n_max=6, nested_p=0.35):
    fields = rng.sample(FIELDS, rng.randint(n_min, n_max))
    if rng.random() < nested_p:
        fields.append(rng.choice(NESTED))
    names = [f[0] for f in fields]
    required = [n for n in names if rng.random() < 0.7] or names[:1]
    return obj(fields, required)


def main():
    rng = random.Random(SEED)
    entries = []

    def add(family, name, schema, description):
        jsonschema.Draft202012Validator.check_schema(schema)
        entries.append({"id": len(entries), "family": family, "name": name, "description": description, "schema": schema})

    # Tool definitions: parameters of function calls.
    for i in range(70):
        tool = TOOL_NAMES[i % len(TOOL_NAMES)]
        add("tool", f"{tool}_{i}", random_object(rng, 1, 5, 0.25), f"Arguments for a call to the {tool.replace('_', ' ')} tool.")
    # API payloads: flat and nested objects.
    payloads = ["user", "order", "payment", "event", "product", "invoice", "ticket", "review", "shipment", "booking"]
    for i in range(70):
        kind = payloads[i % len(payloads)]
        add("payload", f"{kind}_{i}", random_object(rng, 2, 7, 0.6), f"A {kind} record as returned by a REST API.")
    # Nested: objects of objects and arrays of objects.
    for i in range(30):
        inner = random_object(rng, 2, 4, 0.0)
        schema = obj([("data", inner), ("meta", obj([("page", {"type": "integer", "minimum": 1, "maximum": 100}),
                                                     ("total", {"type": "integer", "minimum": 0, "maximum": 10000})], ["page"]))],
                     ["data"])
        if i % 2:
            schema = obj([("results", {"type": "array", "items": inner, "minItems": 1, "maxItems": 2}),
                          ("next_cursor", {"type": ["string", "null"], "maxLength": 16})], ["results"])
        add("nested", f"envelope_{i}", schema, "A paginated API response envelope.")
    # Composition keywords.
    for i in range(20):
        a, b = random_object(rng, 1, 3, 0.0), random_object(rng, 1, 3, 0.0)
        a["properties"]["type"] = {"const": "a"}
        b["properties"]["type"] = {"const": "b"}
        a["required"] = sorted(set(a["required"]) | {"type"})
        b["required"] = sorted(set(b["required"]) | {"type"})
        key = "oneOf" if i % 2 else "anyOf"
        add("union", f"union_{i}", {key: [a, b]}, "One of two tagged variants.")
    for i in range(10):
        base = random_object(rng, 1, 3, 0.0)
        extra = random_object(rng, 1, 2, 0.0)
        for k in list(extra["properties"]):
            if k in base["properties"]:
                del extra["properties"][k]
                extra["required"] = [r for r in extra["required"] if r != k]
        if not extra["properties"]:
            extra = obj([("note", s(20))], ["note"])
        base.pop("additionalProperties")
        extra.pop("additionalProperties")
        add("allof", f"allof_{i}", {"allOf": [base, extra]}, "Two object schemas merged with allOf.")
    # Recursive schemas, several copies with different wrappers.
    for i in range(20):
        name, schema = RECURSIVE[i % len(RECURSIVE)]
        schema = json.loads(json.dumps(schema))
        if i >= len(RECURSIVE):
            schema.setdefault("description", f"variant {i}")
        add("recursive", f"{name}_{i}", schema, f"A recursive {name.replace('_', ' ')}.")
    # Arrays and scalars at the root.
    for i in range(10):
        item = rng.choice(FIELDS)[1]
        add("root_array", f"list_{i}", {"type": "array", "items": item, "minItems": 1, "maxItems": 3}, "A short list.")

    doc = {"generator": "tools/oracle/structured_schemas.py", "seed": SEED, "jsonschema_version": importlib.metadata.version("jsonschema"),
           "count": len(entries), "schemas": entries}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {len(entries)} schemas to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
