#!/usr/bin/env python3
"""End-to-end structured output: the official openai client against `brioche serve`
on the default model; outputs judged by the `jsonschema` package.

Run: python3 tests/server/structured_e2e_test.py --brioche build/cpu/brioche [--model PATH]
(CTest runs it through tests/server/CMakeLists.txt.) Prints a SKIP line and exits 77 (CTest reports it as skipped)
when `openai`/`jsonschema` or the default model is missing.
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import server_e2e_test  # noqa: E402  (ServerProcess)
from server_e2e_test import DEFAULT_MODEL, ServerProcess  # noqa: E402

ARGS = None
SERVER = None
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def validate(schema, text):
    import jsonschema
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
    return value


def client_for(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=300, max_retries=0)


def schema_format(schema, name="answer", strict=None, any_whitespace=None):
    js = {"name": name, "schema": schema}
    if strict is not None:
        js["strict"] = strict
    if any_whitespace is not None:
        js["any_whitespace"] = any_whitespace
    return {"type": "json_schema", "json_schema": js}


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


class StructuredOutput(unittest.TestCase):
    def chat(self, content, **kw):
        return client_for(SERVER).chat.completions.create(
            model="", messages=[{"role": "user", "content": content}], temperature=0, **kw)

    def test_json_schema_validates_and_stops(self):
        r = self.chat("Describe a person as JSON.", max_tokens=80, response_format=schema_format(PERSON, "person"))
        validate(PERSON, r.choices[0].message.content)
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_json_object(self):
        r = self.chat("Give me a JSON object about a cat.", max_tokens=120, response_format={"type": "json_object"})
        if r.choices[0].finish_reason == "stop":
            json.loads(r.choices[0].message.content)
        else:  # length: a prefix of JSON, starts like one
            self.assertEqual(r.choices[0].finish_reason, "length")
            self.assertIn(r.choices[0].message.content.lstrip()[:1], "{[")

    def test_streaming_json_schema(self):
        stream = client_for(SERVER).chat.completions.create(
            model="", messages=[{"role": "user", "content": "A person as JSON."}], temperature=0, max_tokens=80,
            response_format=schema_format(PERSON, "person", any_whitespace=False), stream=True)
        text, finish = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        validate(PERSON, text)
        self.assertEqual(finish, "stop")
        self.assertNotIn("\n", text)  # compact separators

    def test_max_tokens_mid_json_is_length(self):
        r = self.chat("Describe a person as JSON.", max_tokens=4, response_format=schema_format(PERSON, "person"))
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 4)
        self.assertTrue(r.choices[0].message.content.lstrip().startswith("{"))

    def test_guided_choice_and_regex(self):
        choices = ["red", "green", "blue \"sky\""]
        r = self.chat("Pick a colour.", max_tokens=10, extra_body={"guided_choice": choices})
        self.assertIn(r.choices[0].message.content, choices)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        c = client_for(SERVER).completions.create(model="", prompt="Call me at", max_tokens=20, temperature=0,
                                                  extra_body={"guided_regex": r"\d{3}-\d{4}"})
        self.assertRegex(c.choices[0].text, r"^\d{3}-\d{4}$")
        g = client_for(SERVER).completions.create(model="", prompt="Answer:", max_tokens=20, temperature=0,
                                                  extra_body={"guided_grammar": 'root ::= ("yes" | "no") "!"'})
        self.assertIn(g.choices[0].text, ["yes!", "no!"])

    def test_precedence_guided_grammar_over_response_format(self):
        r = self.chat("Say something.", max_tokens=20, response_format=schema_format(PERSON),
                      extra_body={"guided_grammar": 'root ::= "ok"', "guided_choice": ["no"]})
        self.assertEqual(r.choices[0].message.content, "ok")
        r = self.chat("Say something.", max_tokens=20, extra_body={"guided_regex": "ab", "guided_choice": ["no"]})
        self.assertEqual(r.choices[0].message.content, "ab")

    def test_strict_malformed_schema_is_400_naming_where(self):
        import openai
        # a tuple's items are not compared with each other: uniqueItems is refused there
        bad = {"type": "object", "properties": {"xs": {"type": "array", "prefixItems": [{}], "uniqueItems": True}}}
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.chat("hi", max_tokens=5, response_format=schema_format(bad, strict=True))
        body = ctx.exception.body
        self.assertEqual(body["param"], "response_format.json_schema.schema")
        self.assertIn("#/properties/xs", body["message"])
        self.assertIn("uniqueItems", body["message"])

    def test_non_strict_malformed_degrades_with_warning(self):
        bad = {"type": "object", "properties": {"a": {"type": "bogus"}}}
        status, headers, body = post(SERVER.url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "response_format": schema_format(bad, strict=False)})
        self.assertEqual(status, 200)
        warning = {k.lower(): v for k, v in headers.items()}.get("warning", "")
        self.assertTrue(warning.startswith("199 brioche"), warning)
        self.assertIn("#/properties/a", warning)
        # The degrade path told the model in a system message: a longer prompt than without the field.
        _, _, plain = post(SERVER.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        self.assertGreater(body["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"] + 10)
        # Streams carry the header too.
        req = urllib.request.Request(SERVER.url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
                                                      "response_format": schema_format(bad)}).encode())
        with urllib.request.urlopen(req, timeout=300) as r:
            self.assertIn("#/properties/a", r.headers.get("Warning", ""))
            r.read()
        status, headers, body = post(SERVER.url + "/v1/completions", {
            "prompt": "x", "max_tokens": 2, "guided_grammar": "root ::= ("})
        self.assertEqual(status, 200)
        self.assertIn("guided_grammar", {k.lower(): v for k, v in headers.items()}.get("warning", ""))

    def test_tool_choice_required_is_constrained_to_parameters(self):
        params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "unit": {"enum": ["celsius", "fahrenheit"]}},
                  "required": ["city", "unit"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}}]
        r = self.chat("What's the weather in Paris?", max_tokens=60, tools=tools, tool_choice="required")
        calls = r.choices[0].message.tool_calls
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].function.name, "get_weather")
        validate(params, calls[0].function.arguments)
        r = self.chat("What's the weather in Paris?", max_tokens=60, tools=tools,
                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
        validate(params, r.choices[0].message.tool_calls[0].function.arguments)

    def test_jump_forward_gives_the_unjumped_output(self):
        # Jump-forward appends only tokens the grammar leaves as the sole choice,
        # so with and without the flag the content and the token count are equal.
        order = {"type": "object", "properties": {
            "status": {"enum": ["pending_review", "shipped_internationally"]},
            "created": {"type": "string", "format": "date"},
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
            "required": ["status", "created", "sku"], "additionalProperties": False}
        cases = [("Describe a person as JSON.", PERSON, False), ("Describe a person as JSON.", PERSON, True),
                 ("An order as JSON.", order, False), ("An order as JSON.", order, True)]
        for prompt, schema, any_ws in cases:
            fmt = schema_format(schema, "s", any_whitespace=any_ws)
            plain = self.chat(prompt, max_tokens=120, response_format=fmt)
            jump = self.chat(prompt, max_tokens=120, response_format=fmt, extra_body={"jump_forward": True})
            validate(schema, jump.choices[0].message.content)
            self.assertEqual(jump.choices[0].finish_reason, "stop")
            self.assertEqual(jump.choices[0].message.content, plain.choices[0].message.content)
            self.assertEqual(jump.usage.completion_tokens, plain.usage.completion_tokens)

    def test_eight_concurrent_requests_with_different_schemas(self):
        schemas = []
        for i in range(8):
            props = {f"field_{i}": {"type": "integer", "minimum": i, "maximum": i + 5},
                     "label": {"type": "string", "enum": [f"L{i}a", f"L{i}b"]}}
            if i % 2:
                props["flag"] = {"type": "boolean"}
            schemas.append({"type": "object", "properties": props, "required": list(props), "additionalProperties": False})
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(self.chat, f"Record {i} as JSON.", max_tokens=60,
                                   response_format=schema_format(s, f"record_{i}", any_whitespace=False))
                       for i, s in enumerate(schemas)]
            outputs = [f.result() for f in futures]
        for i, r in enumerate(outputs):
            value = validate(schemas[i], r.choices[0].message.content)
            self.assertIn(f"field_{i}", value)  # its own schema, not a neighbour's
            self.assertEqual(r.choices[0].finish_reason, "stop")


class GrammarKillSwitch(unittest.TestCase):
    def test_brioche_grammar_0_degrades_with_warning(self):
        os.environ["BRIOCHE_GRAMMAR"] = "0"
        try:
            server = ServerProcess()
        finally:
            del os.environ["BRIOCHE_GRAMMAR"]
        try:
            status, headers, body = post(server.url + "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "A person"}], "max_tokens": 4,
                "response_format": schema_format(PERSON, "person", strict=True)})
            self.assertEqual(status, 200)  # degrade everywhere, even strict
            self.assertIn("BRIOCHE_GRAMMAR=0", {k.lower(): v for k, v in headers.items()}.get("warning", ""))
        finally:
            server.stop()


def main():
    global ARGS, SERVER
    parser = argparse.ArgumentParser()
    parser.add_argument("--brioche", default=os.environ.get("BRIOCHE_BIN", "build/cpu/brioche"))
    parser.add_argument("--model", default=os.environ.get("BRIOCHE_MODEL", DEFAULT_MODEL))
    ARGS, rest = parser.parse_known_args()
    try:
        import jsonschema  # noqa: F401
        import openai  # noqa: F401
    except ImportError as e:
        print(f"SKIP structured_e2e: python package missing ({e.name}); pip install openai jsonschema")
        return 77  # CTest: SKIP_RETURN_CODE
    if not os.path.exists(ARGS.model):
        print(f"SKIP structured_e2e: model {ARGS.model} not found")
        return 77  # CTest: SKIP_RETURN_CODE
    server_e2e_test.ARGS = ARGS
    SERVER = ServerProcess()
    try:
        result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    finally:
        SERVER.stop()
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
