"""Writes a golden file of cases whose candidates `jsonschema` judged
(pattern_length_goldens.py, format_length_goldens.py, ...): the generator, the
judge's version and the cases, then a count per case on stdout."""
import importlib.metadata
import json
import re


def write(out, generator, cases, ensure_ascii=True):
    judge = f"jsonschema {importlib.metadata.version('jsonschema')} (Draft 2020-12)"
    with open(out, "w") as f:
        json.dump({"generator": generator, "judge": judge, "cases": cases}, f, indent=0, ensure_ascii=ensure_ascii)
        f.write("\n")
    n = sum(len(c["candidates"]) for c in cases)
    v = sum(x["valid"] for c in cases for x in c["candidates"])
    print(f"{out}: {len(cases)} schemas, {n} candidates ({v} valid)")
    for c in cases:
        print(c["name"], len(c["candidates"]), sum(x["valid"] for x in c["candidates"]))


def fill(pieces, total, grow):
    """pieces: [text, ...]; the piece at index `grow` repeated so that the
    string has `total` characters (None when the others are already longer)."""
    fixed = sum(len(p) for i, p in enumerate(pieces) if i != grow)
    unit = pieces[grow]
    if total < fixed or (total - fixed) % len(unit):
        return None
    return [(p, (total - fixed) // len(unit) if i == grow else 1) for i, p in enumerate(pieces)]


# format: uri as the grammar writes it (RFC 3986's syntax; schema_formats.cpp's format_regex).
PCT = "%[0-9A-Fa-f][0-9A-Fa-f]"
PCHAR = f"([a-zA-Z0-9_.~!$&'()*+,;=:@\\-]|{PCT})"
URI = re.compile(
    "[a-zA-Z][a-zA-Z+.\\-]*:(//(([a-zA-Z0-9_.~!$&'()*+,;=:\\-]|" + PCT + ")*@)?([a-zA-Z0-9_.~!$&'()*+,;=\\-]|" + PCT
    + ")*(:[0-9]*)?(/" + PCHAR + "*)*|/?(" + PCHAR + "+(/" + PCHAR + "*)*)?)(\\?([a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-]|"
    + PCT + ")*)?(#([a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-]|" + PCT + ")*)?")
