"""Writes a golden file of cases whose candidates `jsonschema` judged
(pattern_length_goldens.py, regex_assertion_goldens.py): the generator, the
judge's version and the cases, then a count per case on stdout."""
import importlib.metadata
import json


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
