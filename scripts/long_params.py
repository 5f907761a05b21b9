#!/usr/bin/env python3
"""Lists the functions declared in C++ headers that break DESIGN.md's rule of
thumb: more than five parameters, or any bool parameter (either becomes a
struct with designated initializers).

    scripts/long_params.py src/ops/*.h src/engine/*.h     one line an offender
    scripts/long_params.py --count src/ops/*.h            the count only

A reader of declarations, not a compiler: comments and strings are dropped,
bodies of functions and initializers are skipped, and at namespace or class
scope every statement `... name(params)` not preceded by `=` is a function.
Good enough for headers written in this repository's style; a miss shows as
a missing line, never as a false error (the script only reports).
"""
import re
import sys

SCOPE_KEYWORDS = ("namespace", "struct", "class", "union", "enum", 'extern "C"')
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "static_assert", "alignas",
                 "noexcept", "requires", "__attribute__", "BRIOCHE_CHECK"}


def strip(text):
    # Comments, string and char literals, preprocessor lines.
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\])*'", "''", text)
    text = re.sub(r"^[ \t]*#[^\n]*", "", text, flags=re.M)
    return text


def split_top(params):
    """Splits a parameter list at commas outside (), <>, {}, []."""
    depth, out, cur = 0, [], ""
    for ch in params:
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out if p.strip() and p.strip() != "void"]


def statements(text):
    """Yields (statement, line) at declaration scope, skipping bodies."""
    i, start, line_of = 0, 0, lambda pos: text.count("\n", 0, pos) + 1
    paren = 0
    while i < len(text):
        ch = text[i]
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        elif ch == ";" and paren == 0:
            yield text[start:i], line_of(start + len(text[start:i]) - len(text[start:i].lstrip()))
            start = i + 1
        elif ch == "{" and paren == 0:
            head = text[start:i]
            flat = " ".join(head.split())
            is_scope = any(re.search(r"(^|[\s>])" + re.escape(k) + r"\b", flat) for k in SCOPE_KEYWORDS) and "(" not in flat
            if is_scope or flat.endswith('extern ""'):
                start = i + 1  # enter the scope: its statements are read in turn
            else:
                # A function body or an initializer: the head is the statement.
                yield head, line_of(start + len(head) - len(head.lstrip()))
                depth = 0
                while i < len(text):
                    if text[i] == "{":
                        depth += 1
                    elif text[i] == "}":
                        depth -= 1
                        if depth == 0:
                            break
                    i += 1
                start = i + 1
        elif ch == "}" and paren == 0:
            start = i + 1
        i += 1


def functions(path):
    text = strip(open(path, encoding="utf-8").read())
    for stmt, line in statements(text):
        s = " ".join(stmt.split())
        s = re.sub(r"^(public|private|protected)\s*:\s*", "", s)
        m = re.match(r"(?P<head>[^=(]*?)(?P<name>~?[A-Za-z_][\w:]*|operator\s*\S+?)\s*\((?P<rest>.*)$", s)
        if not m or m.group("name").split("::")[-1] in NOT_FUNCTIONS or m.group("name").isupper():
            continue
        if not m.group("head").strip() and not m.group("name")[0].isupper() and "::" not in m.group("name"):
            continue  # a bare call at scope (a macro), not a declaration
        rest, depth, end = m.group("rest"), 1, None
        for k, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = k
                break
        if end is None:
            continue
        params = split_top(rest[:end])
        yield line, m.group("name"), params


def main(argv):
    count_only = "--count" in argv
    paths = [a for a in argv if a != "--count"]
    total = 0
    for path in paths:
        for line, name, params in functions(path):
            # A flag: bool by value (bool* and bool& out-parameters are not flags).
            bools = [p for p in params if re.match(r"^(const\s+)?bool\s+\w", p)]
            if len(params) > 5 or bools:
                total += 1
                if not count_only:
                    why = f"{len(params)} parameters" if len(params) > 5 else ""
                    if bools:
                        why += (", " if why else "") + "bool " + ", ".join(b.split("=")[0].split()[-1] for b in bools)
                    print(f"{path}:{line}: {name} ({why})")
    print(f"{total} functions with more than five parameters or a bool parameter", file=sys.stderr if not count_only else sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
