"""Goldens for a `format` beside minLength/maxLength where the format's
strings vary in length (date-time, time, ipv4, ipv6, email, hostname, uri,
json-pointer): one
count of characters over the format's language (the grammar's `%{m,n}`,
schema_strings.cpp's format_with_length). `"format": "uri", "maxLength":
4096` and `"format": "email", "maxLength": 254` are common in real schemas
(Snowplow, CloudFormation). For each schema, well-formed values of lengths
a few characters around each bound, the length spread over different
varying parts (fractional seconds, offsets, octets, labels, paths, a quoted
local part), and values that break the format at an allowed length.

Judged by `jsonschema` (Draft 2020-12 with its format checker). It checks
date-time, time, ipv4, ipv6, email and json-pointer; it does not check hostname and uri here
(no fqdn, no rfc3987), and its email is any string with an "@", where the
grammar writes RFC 5321's dot-atom or quoted local part and a domain of
labels. So, as in keys_and_formats_goldens.py, candidates whose verdict
would only say that the judge does not check the format are left out:
hostname, uri and email candidates are kept only when they are in the
grammar's language for that format or have the wrong length or no "@"
(email). tests/grammar/format_length_test.cpp checks that the grammar
accepts exactly the valid ones and that masks near the bounds are exact.

A candidate is stored as parts [[text, times], ...] of its JSON text, so
8,000-character values cost a few bytes here.

  python3 tools/oracle/format_length_goldens.py   # writes tests/grammar/golden/format_length.json
"""
import json
import os
import re

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "format_length.json")

# The grammar's languages for the formats the judge does not check (schema_formats.cpp).
HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9\-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9\-]*[a-z0-9])?)*")
ATEXT = r"[a-zA-Z0-9_!#$%&'*+/=?^`{|}~\-]"
EMAIL = re.compile("(" + ATEXT + "+(\\." + ATEXT + "+)*|\"(\\\\[ -~]|[ !#-\\[\\]-~])*\")"
                   r"@[A-Za-z0-9]([\-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9][\-A-Za-z0-9]*[A-Za-z0-9])*")
UNCHECKED = {"hostname": HOSTNAME, "uri": judged_goldens.URI, "email": EMAIL}


CASES = []


def case(name, fmt, lo, hi, shapes, extra=()):
    """shapes: ([pieces], index of the growing piece), each filled to every
    length a few characters around the bounds; extra: fixed values."""
    schema = {"type": "string", "format": fmt}
    if lo is not None:
        schema["minLength"] = lo
    if hi is not None:
        schema["maxLength"] = hi
    totals = set()
    for b in [lo or 0] + ([hi] if hi is not None else []):
        totals.update(n for n in range(b - 3, b + 4) if n >= 0)
    cands = []
    for pieces, grow in shapes:
        for t in sorted(totals):
            f = judged_goldens.fill(pieces, t, grow)
            if f is not None:
                cands.append(f)
    cands += [[(s, 1)] for s in extra]
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    out, seen = [], set()
    for parts in cands:
        value = "".join(p * k for p, k in parts)
        if value in seen:
            continue
        seen.add(value)
        length_ok = len(value) >= (lo or 0) and (hi is None or len(value) <= hi)
        grammar_language = UNCHECKED.get(fmt)
        if grammar_language is not None and length_ok and not grammar_language.fullmatch(value) and not (
                fmt == "email" and "@" not in value):
            continue  # the judge does not check this format as the grammar writes it
        doc = [['"', 1]] + [[json.dumps(p, ensure_ascii=False)[1:-1], k] for p, k in parts if k] + [['"', 1]]
        out.append({"parts": doc, "valid": validator.is_valid(value)})
    assert any(c["valid"] for c in out) and any(not c["valid"] for c in out), name
    CASES.append({"name": name, "schema": schema, "candidates": out})


# Fractional seconds and offsets carry the length.
case("date_time_22_27", "date-time", 22, 27, [
    (["2024-02-29T23:59:58.", "1", "Z"], 1),
    (["1999-12-31T00:00:00.", "9", "+05:30"], 1),
    (["2000-01-01T12:00:00", ".5"], 1),
], extra=["2024-02-29T23:59:58Z", "2023-02-29T23:59:58.12Z", "2024-13-01T00:00:00.12Z", "2024-02-29 23:59:58.12Z",
          "2024-02-29T24:00:00.12Z", "abcdefghijklmnopqrstuvwx"])
case("time_at_most_12", "time", None, 12, [
    (["12:34:56.", "0", "Z"], 1),
    (["23:59:59", "Z"], 1),
], extra=["12:34:56+01:00", "12:34:56Z", "24:00:00Z", "12:60:00Z", "1:2:3Z"])
case("ipv4_9_11", "ipv4", 9, 11, [
    (["10.", "1", ".0.1"], 1),
    (["1.2.3.", "4"], 1),
], extra=["1.2.3.4", "10.10.10.10", "100.10.10.10", "256.1.1.1", "10.10.1.01", "10.10.10.", "a.b.c.d.e"])
case("email_5_16", "email", 5, 16, [
    (["a", "b", "@ex.io"], 1),
    (["x@", "d", ".org"], 1),
    (['"a ', "b", '"@x.io'], 1),
    (["a.b", "c", "@d-e.co"], 1),
], extra=["a@b", "plainaddress", "a@b.c", "a..b@c.io", "@example.io", "a@-b.io", "abcdefghijk@l.io"])
case("hostname_4_12", "hostname", 4, 12, [
    (["a", "b", ".io"], 1),
    (["x-", "y", "z.a1"], 1),
], extra=["a.b", "ab-.io", "-ab.io", "a..b", "abc", "Ab.io"])
case("uri_at_most_30", "uri", None, 30, [
    (["https://ex.io/", "a"], 1),
    (["urn:isbn:", "0"], 1),
    (["http://h.io/p?q=", "1", "#f"], 1),
], extra=["https://ex.io/a b", "ex.io/path", "1http://x.io", "mailto:a@b.io", "http://[::1]/"])
# IPv6 as Python's ipaddress reads it (no scope id), the length in groups and "::".
case("ipv6_3_41", "ipv6", 3, 41, [
    (["fe80::", "a"], 1),
    (["1:2:3:4:5:6:", "f", ":8"], 1),
    (["::ffff:1.2.3.", "4"], 1),
    (["2001:db8::", "0"], 1),
], extra=["::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9",
          "1::2::3", "12345::", "fe80::1%eth0", "::ffff:1.2.3.04", "::ffff:256.1.1.1", "1:2:3:4:5:6:1.2.3.4",
          "1:2:3:4:5:6:7:1.2.3.4", ":1:2::", "ABCD:EF01::", "g::1", "0000:0000:0000:0000:0000:0000:0000:0001",
          "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", "1.2.3.4"])
# RFC 6901 pointers: "" or "/"-prefixed tokens, ~ only as ~0 or ~1, any other character.
case("json_pointer_at_most_12", "json-pointer", None, 12, [
    (["/a", "b", "/c"], 1),
    (["/~0", "x", "~1"], 1),
    (["/", "é"], 1),
], extra=["", "/", "//", "a/b", "/~2", "/~", "/a~", '/a"b', "/a\\b", "/a\nb", "/ /", "/0/1"])
# A bound far past the longest token: the count runs through its counted layer.
case("uri_at_most_8192", "uri", 16, 8192, [
    (["https://ex.io/", "a"], 1),
    (["https://ex.io/?q=", "%20"], 1),
], extra=["https://ex.io", "http://a.io/%zz"])

judged_goldens.write(OUT, "tools/oracle/format_length_goldens.py", CASES)
