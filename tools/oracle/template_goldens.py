#!/usr/bin/env python3
"""Regenerate tests/template/golden/chat_templates.json (plain JSON, ~80 kB): chat-template renders
by transformers (the real oracle: its jinja2 sandbox with trim_blocks, lstrip_blocks,
loopcontrols, its tojson/raise_exception/strftime_now) for five model families, plus
small feature templates that exercise the Jinja subset one construct at a time.

Usage: python3 tools/oracle/template_goldens.py   (run from the repository root)

Family renders go through the same steps as tokenizer.apply_chat_template(tokenize=False):
_normalize_chat_messages (drop None-valued keys), the special-tokens map, then
render_jinja_template. For families with a tokenizer fixture we also call the real
tokenizer.apply_chat_template and assert both agree.
"""
import json
import os
import sys
import tempfile

import gguf
import jinja2
import transformers

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import (
    _compile_jinja_template,
    _normalize_chat_messages,
    render_jinja_template,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests/fixtures/tokenizers")
OUT = os.path.join(ROOT, "tests/template/golden/chat_templates.json")
SMOLLM2_GGUF = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")

# The Llama-2 fixture config carries no chat template; this is the well-known
# Llama-2-chat template (meta-llama/Llama-2-7b-chat-hf, also transformers' old
# LlamaTokenizer default without the default system prompt).
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


def zstd_json(path):
    import subprocess
    return json.loads(subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout)


def gguf_string(reader, key):
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def gguf_token(reader, id_key):
    field = reader.fields[id_key]
    token_id = int(field.parts[field.data[0]][0])
    tokens = reader.fields["tokenizer.ggml.tokens"]
    return bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8")


def load_families():
    families = {}
    reader = gguf.GGUFReader(SMOLLM2_GGUF)
    families["smollm2"] = {
        "source": "GGUF tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf",
        "template": gguf_string(reader, "tokenizer.chat_template"),
        "special_tokens": {"bos_token": gguf_token(reader, "tokenizer.ggml.bos_token_id"),
                           "eos_token": gguf_token(reader, "tokenizer.ggml.eos_token_id"),
                           "unk_token": gguf_token(reader, "tokenizer.ggml.unknown_token_id"),
                           "pad_token": gguf_token(reader, "tokenizer.ggml.padding_token_id")},
        "fixture": None,
    }
    for name in ["llama2", "llama3", "qwen3", "gemma3"]:
        config = zstd_json(os.path.join(FIXTURES, name, "tokenizer_config.json.zst"))
        template = config.get("chat_template") or (LLAMA2_TEMPLATE if name == "llama2" else None)
        assert template, name
        special = {}
        for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if value is not None:
                special[key] = value
        families[name] = {
            "source": ("well-known Llama-2-chat template (fixture has none)" if name == "llama2"
                       else f"tests/fixtures/tokenizers/{name}/tokenizer_config.json.zst"),
            "template": template,
            "special_tokens": special,
            "fixture": name,
        }
    return families


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time (ISO 8601) in a time zone — «UTC» default.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}, "precision": {"type": "number", "default": 1.5}}}}}


def conversations():
    """(name, messages, tools, add_generation_prompt, extra kwargs)."""
    system = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
    convs = [
        ("user_genprompt", [{"role": "user", "content": "Hello!"}], None, True, {}),
        ("user_no_genprompt", [{"role": "user", "content": "Hello!"}], None, False, {}),
        ("system_user", [system, {"role": "user", "content": "What is 2+2?"}], None, True, {}),
        ("multi_turn", [system, {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello, how can I help?"},
                        {"role": "user", "content": "Tell me a joke."}], None, True, {}),
        ("multi_turn_ends_assistant", [{"role": "user", "content": "  padded question \n"},
                                       {"role": "assistant", "content": " padded answer  "}], None, False, {}),
        ("unicode_and_quotes", [{"role": "user", "content": "Ça va? \"quoted\" 'single' \\ back\\slash 日本語 🍞\n\tnext"}],
         None, True, {}),
        ("tools_defined", [system, {"role": "user", "content": "Weather in Paris?"}],
         [WEATHER_TOOL, TIME_TOOL], True, {}),
        ("tool_call_roundtrip", [
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]},
            {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "tool", "content": "{\"temp\": 18}"},
            {"role": "assistant", "content": "Paris 21°C, Tokyo 18°C."},
            {"role": "user", "content": "Thanks"}], [WEATHER_TOOL], True, {}),
        ("tool_call_content_none", [
            {"role": "user", "content": "Time?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "UTC", "precision": 0.5}}}]},
            {"role": "tool", "content": "12:00"}], [TIME_TOOL], True, {}),
        ("thinking_off", [{"role": "user", "content": "Quick: capital of France?"}], None, True,
         {"enable_thinking": False}),
        ("thinking_on", [{"role": "user", "content": "Quick: capital of France?"}], None, True,
         {"enable_thinking": True}),
        ("reasoning_content_history", [
            {"role": "user", "content": "What is 3*7?"},
            {"role": "assistant", "content": "21", "reasoning_content": "\n3 times 7 is 21.\n"},
            {"role": "user", "content": "And 3*8?"},
            {"role": "assistant", "content": "24", "reasoning_content": "3*8=24"}], None, False, {}),
        ("inline_think_history", [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHello!"},
            {"role": "user", "content": "Bye"}], None, True, {"enable_thinking": False}),
        ("content_parts", [{"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
                           {"role": "user", "content": [{"type": "text", "text": " Describe "},
                                                        {"type": "image"}, {"type": "text", "text": "this."}]}],
         None, True, {}),
        ("not_alternating", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None, True, {}),
    ]
    return convs


def render_family(family, messages, tools, add_generation_prompt, kwargs):
    conversation = _normalize_chat_messages(messages)
    template_kwargs = {**family["special_tokens"], **kwargs}
    try:
        rendered, _ = render_jinja_template(conversations=[conversation], tools=tools, chat_template=family["template"],
                                            add_generation_prompt=add_generation_prompt, **template_kwargs)
        return {"expected": rendered[0]}
    except Exception as e:  # noqa: BLE001  the golden records the failure
        return {"error": f"{type(e).__name__}: {e}"}


def check_with_tokenizer(name, family, messages, tools, add_generation_prompt, kwargs, result):
    """The real apply_chat_template must agree with our decomposition of it."""
    with tempfile.TemporaryDirectory() as tmp:
        for fname in ["tokenizer.json", "tokenizer_config.json"]:
            data = zstd_json(os.path.join(FIXTURES, family["fixture"], fname + ".zst"))
            with open(os.path.join(tmp, fname), "w") as f:
                json.dump(data, f)
        tok = AutoTokenizer.from_pretrained(tmp)
        try:
            got = {"expected": tok.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                                       chat_template=family["template"], tokenize=False, **kwargs)}
        except Exception as e:  # noqa: BLE001
            got = {"error": f"{type(e).__name__}: {e}"}
    assert got == result, (name, got, result)


# Feature templates: (name, template, context). Rendered by the same jinja2 environment.
FEATURES = [
    ("ws_trim_blocks", "{% if true %}\n  yes\n{% endif %}\nafter\n", {}),
    ("ws_lstrip_blocks", "line\n    {% if true %}\n    body\n    {% endif %}\nend", {}),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c\n\n{{- ' d ' -}}\n e", {}),
    ("ws_plus", "x\n    {%+ if true +%}\ny{% endif %}", {}),
    ("ws_var_not_lstripped", "  {{ 'v' }}\n  {# c #}\nz", {}),
    ("ws_comment_minus", "a {#- note -#} b", {}),
    ("ws_trailing_newline", "text\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("string_escapes", "{{ 'tab\\there\\nnl \\'q\\' \\\"dq\\\" \\\\ \\u00e9 \\x41 \\d' }}{{ \"a\" 'b' }}", {}),
    ("slicing", "{{ s[::-1] }}|{{ s[1:] }}|{{ s[:2] }}|{{ s[-2:] }}|{{ l[1:3] }}|{{ l[::2] }}|{{ l[-1] }}|{{ s[0] }}|{{ s[-1] }}",
     {"s": "héllo", "l": [1, 2, 3, 4, 5]}),
    ("in_not_in", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in d }} {{ 'x' in d }}", {"d": {"k": 1}}),
    ("tests", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }}"
              " {{ l is iterable }} {{ s is iterable }} {{ 3 is number }} {{ 3 is integer }} {{ 3.5 is float }} {{ true is boolean }}"
              " {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ l is sequence }} {{ d is not mapping }} {{ s is lower }}"
              " {{ n is not none }} {{ false is false }} {{ 1 is true }} {{ x is eq 1 }} {{ 'a' is in 'abc' }}",
     {"x": 1, "n": None, "s": "str", "d": {}, "l": [1]}),
    ("loop_vars", "{% for x in l %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/"
                  "{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a','b') }};{% endfor %}", {"l": [10, 20, 30]}),
    ("loop_else_filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}",
     {"l": [1, 2, 3]}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }}{% endfor %}{% for a, b in [[1,2],[3,4]] %}{{ a+b }}{% endfor %}",
     {"d": {"z": 1, "a": 2, "m": 3}}),
    ("loop_scope", "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = i * 10 %}{{ x }};{% endfor %}{{ x }}", {}),
    ("nested_loops", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for x in [1,2,3] %}{% set ns.count = ns.count + x %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} {{ greet(name='Di', greeting='Yo') }}", {}),
    ("macro_recursive", "{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() %}{{ k }}:{{ render(x) }},{% endfor %}{{ '}' }}{% elif v is iterable and v is not string %}[{% for x in v %}{{ render(x) }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ render(data) }}",
     {"data": {"a": [1, {"b": "c"}], "d": None}}),
    ("set_block", "{% set greeting %}Hi {{ name }}!{% endset %}[{{ greeting | upper }}]", {"name": "Zed"}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 'x') %}{{ t }}{{ t[1] }}", {}),
    ("filters_str", "{{ '  pad  '|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|capitalize }}|{{ 'hello world'|title }}"
                    "|{{ 'a-b-a'|replace('a', 'x') }}|{{ 'a-b-a'|replace('a', 'x', 1) }}|{{ 'abc'|length }}|{{ 'abc'|count }}|{{ 'x'|string }}"
                    "|{{ 'line1\\nline2'|indent(2) }}|{{ 'line1\\nline2'|indent(4, true) }}|{{ 'x'|safe }}|{{ '<a&b>'|e }}|{{ 'abc'|list }}|{{ 'abc'|first }}|{{ 'abc'|last }}"
                    "|{{ 'xxhixx'|trim('x') }}|{{ 'a b  c'|wordcount }}|{{ 'ab'|center(6) }}|{{ 'abc'|reverse }}", {}),
    ("filters_num", "{{ '42'|int }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ '2.5'|float }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.567|round(2) }}|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(0, 'floor') }}"
                    "|{{ -3|abs }}|{{ [1,2,3]|sum }}|{{ [3,1,2]|min }}|{{ [3,1,2]|max }}|{{ 7|string }}|{{ '0x1A'|int(0, 16) }}", {}),
    ("filters_list", "{{ l|join(', ') }}|{{ l|length }}|{{ l|first }}|{{ l|last }}|{{ l|reverse|list }}|{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ [1,1,2,1]|unique|list }}"
                     "|{{ [[1,2],[3]]|map('length')|list }}|{{ users|map(attribute='name')|join('/') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}"
                     "|{{ users|rejectattr('admin')|map(attribute='name')|list }}|{{ users|selectattr('name', 'equalto', 'bo')|list|length }}|{{ [0,1,2,none]|select|list }}"
                     "|{{ [1,2,3,4]|select('odd')|list }}|{{ [1,2,3,4]|reject('even')|list }}|{{ users|map(attribute='age', default=0)|list }}|{{ l|batch(2)|list }}"
                     "|{{ users|sort(attribute='name')|map(attribute='name')|list }}|{{ ['b','A','c']|sort }}|{{ [['a', 1]]|list }}|{{ users|map(attribute='name')|map('upper')|list }}",
     {"l": [3, 1, 2], "users": [{"name": "cy", "admin": True}, {"name": "al", "admin": False}, {"name": "bo", "admin": True, "age": 4}]}),
    ("filters_dict", "{{ d|items|list }}|{{ d|dictsort }}|{{ d|length }}|{{ d|list }}|{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}"
                     "|{{ d|tojson(separators=(',', ':')) }}|{{ (d|items|first)[0] }}|{{ d.b|default('none') }}|{{ d.zz|default('dflt') }}|{{ none|default('n', true) }}|{{ ''|d('empty', true) }}",
     {"d": {"b": 1, "a": [1.5, None, True, "é\u0001\"\\/"], "c": {"x": {}}}}),
    ("tojson_values", "{{ 1.0|tojson }} {{ 1e-7|tojson }} {{ 1e22|tojson }} {{ 0.1|tojson }} {{ 1234567890123456789|tojson }} {{ -0.0|tojson }} {{ 1e100|tojson }} {{ [1, 2.5, 'x']|tojson(indent=4) }} {{ {}|tojson(indent=2) }} {{ []|tojson(indent=2) }} {{ 'a\\u2028b\\x7f'|tojson }}", {}),
    ("python_repr", "{{ [1, 'a', none, true, 1.5, {'k': [1]}, \"it's\"] }}|{{ {'a': 1} }}|{{ none }}|{{ 1e16 }}|{{ 0.00001 }}|{{ 1234567.0 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}|{{ (1, 2) }}|{{ (1,) }}", {}),
    ("arith", "{{ 10/4 }}|{{ 10//4 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 2**10 }}|{{ -2**2 }}|{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 'ab' * 3 }}|{{ '=' * 0 }}|{{ 1.5 * 2 }}"
              "|{{ 'a' ~ 1 ~ none }}|{{ [1] + [2] }}|{{ 5 - 7 }}|{{ 7.0 // 2 }}|{{ 2 ** -1 }}|{{ 1 == 1.0 }}|{{ 'a' < 'b' }}|{{ [1,2] == [1,2] }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}", {}),
    ("logic", "{{ true and 'x' }}|{{ false or 'y' }}|{{ not [] }}|{{ '' or none }}|{{ 0 and 1 }}|{{ 'yes' if x else 'no' }}|{{ 'yes' if y else 'no' }}|{{ 'a' if false }}|{{ none is none and not x is none }}", {"x": 1}),
    ("str_methods", "{{ s.startswith('He') }} {{ s.endswith('!') }} {{ s.split(' ') }} {{ s.split() }} {{ 'a,b,,c'.split(',', 1) }} {{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}"
                    "|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'x  '.rstrip() }}|{{ s.replace('l', 'L') }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello there'.title() }}"
                    "|{{ s.find('l') }}|{{ s.count('l') }}|{{ '{} and {}'.format(1, 'b') }}|{{ '-'.join(['a', 'b']) }}|{{ 'Abc'.capitalize() }}|{{ 'a\\nb'.splitlines() }}"
                    "|{{ '12'.isdigit() }}|{{ s.rsplit('l', 1) }}|{{ s.partition(' ')[2] }}|{{ 'ab'.removeprefix('a') }}|{{ s[0].isupper() }}|{{ 'x'.ljust(3) }}|",
     {"s": "Hello World!"}),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dv') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.a }} {{ d['b'] }} {{ d.items is callable }} {{ d['items'] }}",
     {"d": {"a": 1, "b": "two", "items": "key-not-method"}}),
    ("undefined_behaviour", "[{{ u }}]{{ u|length }}{{ u is defined }}{{ 'a' in u }}{{ u ~ 'x' }}{{ u|default('dv') }}{% for x in u %}no{% endfor %}{{ not u }}{{ u == v }}{{ d.missing }}{{ u|string }}{{ u|list }}", {"d": {}}),
    ("whitespace_mix", "{%- for m in messages -%}\n  {{- m.role }}: {{ m.content | trim -}}\n  {%- if not loop.last %}\n{% endif -%}\n{%- endfor %}\n",
     {"messages": [{"role": "user", "content": " a "}, {"role": "assistant", "content": "b\n"}]}),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{{ 1 }}", {}),
    ("globals", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'it' }}{% endfilter %}", {}),
    ("generation_block", "{% for m in messages %}{% generation %}{{ m }}{% endgeneration %}{% endfor %}", {"messages": ["a", "b"]}),
    ("dict_literal_order", "{% set d = {'z': 1, 'a': 2} %}{{ d|tojson }}{{ d }}{% for k in d %}{{ k }}{% endfor %}", {}),
    ("int_float_keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'n'} }}", {}),
    ("comparisons_mixed", "{{ 1 != 'a' }} {{ none == none }} {{ [1] != [2] }} {{ {'a':1} == {'a':1} }} {{ 2 >= 2.0 }} {{ 'B' < 'a' }} {{ [1,2] < [1,3] }}", {}),
    ("is_string_tool_args", "{% for tc in calls %}{% if tc.arguments is string %}{{ tc.arguments }}{% else %}{{ tc.arguments|tojson }}{% endif %};{% endfor %}",
     {"calls": [{"arguments": "{\"a\": 1}"}, {"arguments": {"a": 1, "b": [True, None]}}]}),
    ("strftime_exists", "{{ strftime_now is defined }}", {}),
    # Error cases: the golden records that jinja2 fails; our tests check that we fail too.
    ("err_raise_exception", "line1\n{{ raise_exception('Custom failure: ' ~ x) }}", {"x": 7}),
    ("err_unknown_filter", "ok\n{{ 'x' | no_such_filter }}", {}),
    ("err_syntax_unclosed", "{% if true %}\nopen", {}),
    ("err_syntax_expr", "a\nb\n{{ 1 + }}", {}),
    ("err_undefined_attr", "{{ u.attr }}", {}),
    ("err_undefined_add", "{{ u + 'x' }}", {}),
    ("err_compare_types", "{{ 1 < 'a' }}", {}),
    ("err_tojson_undefined", "{{ u|tojson }}", {}),
    ("err_unknown_tag", "{% frobnicate %}", {}),
    ("err_endfor_mismatch", "{% for x in [1] %}{% endif %}", {}),
    ("err_call_non_callable", "{{ 'abc'() }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
]


def render_feature(template, context):
    try:
        return {"expected": _compile_jinja_template(template).render(**context)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    families = load_families()
    cases = []
    for family_name, family in families.items():
        for conv_name, messages, tools, add_gen, kwargs in conversations():
            result = render_family(family, messages, tools, add_gen, kwargs)
            if family["fixture"]:
                check_with_tokenizer(family_name, family, messages, tools, add_gen, kwargs, result)
            cases.append({"family": family_name, "name": conv_name, "messages": messages, "tools": tools,
                          "add_generation_prompt": add_gen, "kwargs": kwargs, **result})
    features = [{"name": name, "template": t, "context": ctx, **render_feature(t, ctx)} for name, t, ctx in FEATURES]
    golden = {
        "generator": "tools/oracle/template_goldens.py",
        "oracle": f"transformers {transformers.__version__} render_jinja_template / apply_chat_template(tokenize=False), jinja2 {jinja2.__version__}",
        "families": {name: {k: v for k, v in f.items() if k != "fixture"} for name, f in families.items()},
        "cases": cases,
        "features": features,
    }
    text = json.dumps(golden, ensure_ascii=False, indent=1)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    ok = sum("expected" in c for c in cases)
    print(f"{len(cases)} family cases ({ok} render, {len(cases) - ok} errors), {len(features)} feature cases -> {OUT}")
    for c in cases + features:
        if "error" in c:
            print("  error:", c.get("family", "feature"), c["name"], c["error"][:100])


if __name__ == "__main__":
    sys.exit(main())
