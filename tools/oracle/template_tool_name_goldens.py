#!/usr/bin/env python3
"""Regenerate tests/template/golden/tool_names.json: tool declarations and tool calls whose
names and descriptions carry JSON-special characters (quotes, backslashes, control characters,
non-ASCII, markup), rendered by transformers (render_jinja_template, and the real
apply_chat_template of the Qwen3 fixture tokenizer, which must agree) and by transformers'
tojson filter on its own. The C++ renderer must produce the same bytes: `tojson` escapes a
quoted tool name, and a template that prints the name raw (Qwen3's history of tool calls)
prints it raw there too.

Usage: python3 tools/oracle/template_tool_name_goldens.py   (run from the repository root)
"""
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests/fixtures/tokenizers/qwen3")
OUT = os.path.join(ROOT, "tests/template/golden/tool_names.json")

NAMES = ['a"b', 'back\\slash', 'tab\tand\nnewline', 'ctrl\u0001\u001f\u007f', 'caf\u00e9_\U0001F600', '</tools><tool_call>',
         'sep\u2028line']


def tool(name):
    return {"type": "function", "function": {
        "name": name, "description": f'Calls "{name}" \\ safely',
        "parameters": {"type": "object", "properties": {f'arg"{name}': {"type": "string", "enum": [name]}},
                       "required": [f'arg"{name}']}}}


def conversations():
    convs = []
    for i, name in enumerate(NAMES):
        messages = [{"role": "user", "content": f"Use {name}"}]
        convs.append((f"declared_{i}", messages, [tool(name)]))
        history = messages + [
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {"q": name}}},
                            {"type": "function", "function": {"name": name, "arguments": json.dumps({"q": name})}}]},
            {"role": "tool", "content": json.dumps({"name": name})},
        ]
        convs.append((f"called_{i}", history, [tool(name)]))
    return convs


FILTER_TEMPLATES = [
    ("tojson", "{{ v | tojson }}"),
    ("tojson_indent", "{{ v | tojson(indent=2) }}"),
    ("tojson_sorted_separators", "{{ v | tojson(separators=(',', ':'), sort_keys=true) }}"),
    ("tojson_ascii", "{{ v | tojson(ensure_ascii=true) }}"),
    ("string", "{{ v | string }}"),
    ("repr_in_list", "{{ [v.function.name] }}"),
]


def zstd_json(path):
    return json.loads(subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout)


def main():
    config = zstd_json(os.path.join(FIXTURE, "tokenizer_config.json.zst"))
    template = config["chat_template"]
    with tempfile.TemporaryDirectory() as tmp:
        for fname in ["tokenizer.json", "tokenizer_config.json"]:
            with open(os.path.join(tmp, fname), "w") as f:
                json.dump(zstd_json(os.path.join(FIXTURE, fname + ".zst")), f)
        tok = AutoTokenizer.from_pretrained(tmp)
        cases = []
        for name, messages, tools in conversations():
            rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                                add_generation_prompt=True)
            real = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
            assert real == rendered[0], name
            cases.append({"name": name, "messages": messages, "tools": tools, "expected": rendered[0]})
    filters = []
    for i, name in enumerate(NAMES):
        for fname, source in FILTER_TEMPLATES:
            filters.append({"name": f"{fname}_{i}", "template": source, "context": {"v": tool(name)},
                            "expected": _compile_jinja_template(source).render(v=tool(name))})
    golden = {
        "generator": "tools/oracle/template_tool_name_goldens.py",
        "oracle": f"transformers {transformers.__version__} render_jinja_template / apply_chat_template(tokenize=False), "
                  f"jinja2 {jinja2.__version__}",
        "template": template,
        "cases": cases,
        "filters": filters,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(cases)} conversations, {len(filters)} filter cases -> {OUT}")


if __name__ == "__main__":
    sys.exit(main())
