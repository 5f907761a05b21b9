"""Grammar cases shared by the golden walks (grammar_goldens.py) and the
benchmark (bench/grammar_xgrammar.py). Each case: (name, kind, source, options)."""

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "city"],
        },
        "active": {"type": "boolean"},
    },
    "required": ["name", "age"],
}

TOOL_WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["location", "unit"],
    "additionalProperties": False,
}

TOOL_CALLS = {
    "type": "object",
    "properties": {
        "tool_calls": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"type": "object", "properties": {"name": {"const": "get_weather"},
                                                      "arguments": {"$ref": "#/$defs/weather"}},
                     "required": ["name", "arguments"]},
                    {"type": "object", "properties": {"name": {"const": "search"},
                                                      "arguments": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1, "maximum": 50}}, "required": ["query"]}},
                     "required": ["name", "arguments"]},
                ]
            },
        }
    },
    "required": ["tool_calls"],
    "$defs": {"weather": TOOL_WEATHER},
}

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"value": {"type": "integer"},
                           "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
            "required": ["value"],
        }
    },
    "$ref": "#/$defs/node",
}

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "created": {"type": "string", "format": "date-time"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}, "phone": {"type": ["string", "null"]}}, "required": ["name", "phone"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number"}}, "required": ["sku", "qty", "price"]}},
        "status": {"enum": ["pending", "paid", "shipped", None, 3]},
        "notes": {"oneOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["id", "items", "status"],
}

MISC = {
    "type": "object",
    "properties": {
        "when": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "time"},
        "ip": {"type": "string", "format": "ipv4"},
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}, {"type": "string"}]},
        "flag": {"const": True},
        "level": {"type": "integer", "minimum": -20, "maximum": 300},
        "ratio": {"type": "number"},
        "nothing": {"type": "null"},
    },
    "required": ["when", "level"],
}

EXTRA = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "k": {"type": "integer"}},
    "required": ["kind"],
    "additionalProperties": {"type": "integer"},
}

OPEN_OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}

SCHEMAS = [
    ("person", PERSON), ("tool_weather", TOOL_WEATHER), ("tool_calls", TOOL_CALLS), ("tree", TREE),
    ("order", ORDER), ("misc", MISC), ("extra_props", EXTRA), ("open_object", OPEN_OBJECT),
    ("any", {}), ("any_object", {"type": "object"}), ("string_list", {"type": "array", "items": {"type": "string"}}),
    ("nullable", {"type": ["integer", "null"]}),
    ("uri", {"type": "object", "properties": {"link": {"type": "string", "format": "uri"}}, "required": ["link"]}),
]

EBNF = [
    ("arith", 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
              'factor ::= [0-9]+ | "(" expr ")"'),
    ("yesno", 'root ::= "yes" | "no" | "maybe"'),
    ("name_list", 'root ::= "[" name ("," " "? name){0,3} "]"\nname ::= [A-Z] [a-z]{1,8}'),
    ("unicode", 'root ::= "«" [^»\\n]{1,20} "»" ("\\n" | "")'),
    ("kv", '# key-value lines (GBNF style)\nroot ::= line+\nline ::= key "=" value "\\n"\n'
           'key ::= [a-zA-Z_] [a-zA-Z0-9_]*\nvalue ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\nt])* "\\"" | [0-9]+ ("." [0-9]+)?'),
    ("csv", 'root ::= row{1,4}\nrow ::= cell ("," cell)* "\\n"\ncell ::= [a-z0-9 ]*'),
    ("sql", 'root ::= "SELECT " cols " FROM " ident (" WHERE " ident " = " num)? ";"\n'
            'cols ::= "*" | ident (", " ident)*\nident ::= [a-z_]+\nnum ::= "-"? [0-9]{1,6}'),
    ("json_builtin", None),
]

REGEX = [
    ("phone", r"\(\d{3}\) \d{3}-\d{4}"),
    ("ident", r"[A-Za-z_]\w{0,15}"),
    ("date", r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$"),
    ("words", r"(hello|hi|hey)( [a-z]+)+[.!?]"),
    ("email", r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}"),
    ("float", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"),
    ("dotty", r"a.{2,5}b"),
    ("spaces", r"\s*[A-Z]+\s+\d+\s*"),
]
