"""Goldens for `pattern`s with assertions: lookahead (?=X) / (?!X), word
boundaries \\b / \\B, anchors inside the pattern (^ in a branch of a group,
\\A, \\Z), alone and with minLength/maxLength. The patterns are the corpus'
(bench/schema_corpus: CloudFormation tag keys `^(?!aws:)...`, S3 bucket
names, cron expressions, URLs) and small ones for each assertion.

For each, candidate strings: the seeds given (valid and invalid ones), their
prefixes and suffixes, each with one character deleted or one character of
the case's alphabet inserted or appended, and seeded random strings over
that alphabet; `jsonschema`'s verdict (Draft 2020-12: a pattern is a Python
`re` search). Python's `$` also matches before a final newline, ECMA-262's
does not: a candidate ending in a newline is kept only where both read it
alike. tests/grammar/regex_assertions_test.cpp checks that the grammar
accepts exactly the valid ones and that its masks are exact.

  python3 tools/oracle/regex_assertion_goldens.py   # writes tests/grammar/golden/regex_assertions.json
"""
import json
import os
import random
import re

import jsonschema

import judged_goldens

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "grammar", "golden", "regex_assertions.json")
CASES = []


def ecma_reads_alike(pattern, value):
    return not (value.endswith("\n") and "$" in pattern)


def case(name, pattern, seeds, alphabet, lo=None, hi=None, limit=160, extra=None):
    schema = {"type": "string"}
    if pattern is not None:
        schema["pattern"] = pattern
    schema.update(extra or {})
    if lo is not None:
        schema["minLength"] = lo
    if hi is not None:
        schema["maxLength"] = hi
    rng = random.Random(name)
    cands = []
    for s in seeds:
        cands += [s, s[1:], s[:-1], s[: len(s) // 2], s[len(s) // 2:]]
        for _ in range(6):
            i = rng.randrange(len(s) + 1)
            cands.append(s[:i] + rng.choice(alphabet) + s[i:])
            if s:
                j = rng.randrange(len(s))
                cands.append(s[:j] + s[j + 1:])
        cands += [s + c for c in rng.sample(alphabet, min(3, len(alphabet)))]
        cands += [c + s for c in rng.sample(alphabet, min(3, len(alphabet)))]
    for _ in range(40):
        cands.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 9))))
    validator = jsonschema.Draft202012Validator(schema)
    out, seen = [], set()
    for value in cands:
        if value in seen or not ecma_reads_alike(json.dumps(schema), value):
            continue
        seen.add(value)
        out.append({"text": json.dumps(value, ensure_ascii=False), "valid": validator.is_valid(value)})
    # Keep the seeds' neighbourhood and both verdicts: valid ones first, then invalid, to the limit.
    valid = [c for c in out if c["valid"]][: limit // 2]
    invalid = [c for c in out if not c["valid"]][: limit - len(valid)]
    CASES.append({"name": name, "schema": schema, "candidates": valid + invalid})


AWS = list("aws:AW-_./=+09 xé")
case("tag_key_not_aws", r"^(?!aws:)[a-zA-Z+-=._:/]+$", ["aws:x", "aws", "awsx:y", "Aws:x", "a:b", "aw:s", "x"], AWS,
     lo=1, hi=12)
case("tag_key_not_aws_any_rest", r"^(?!aws:.*)[a-zA-Z0-9\s\:\_\.\/\=\+\-]+$", ["aws:", "aws", "aws :", "ab c", ""],
     AWS)
case("not_blank_or_path", r"^(?!\s*$).+|(\$(\.[\w/_-]+(\[(\d+|\*)\])*)*)$", ["", " ", "$.a[1]", "x"], list(" $.a[1]*x"))
case("not_only_digits", r"^(?!^[0-9]+$)([a-zA-Z0-9\-_' ']+)$", ["123", "12a", "a 1", "1-2", "", "_"], list("19a -_'"))
case("media_package_log_group", r"\A^(\/aws\/MediaPackage\/)[a-zA-Z0-9_-]+\Z",
     ["/aws/MediaPackage/x-1", "/aws/MediaPackage/", "x/aws/MediaPackage/a", "/aws/MediaPackage/a\n"],
     list("/aM-x1_\n"))
case("path_no_dot_segments", r"^(\/|(\/(?!\.)+[^$#<>;;`|&?{}^*/\n]+){1,4})$",
     ["/", "/a", "/.a", "/a/b/c/d", "/a/b/c/d/e", "/a/.b", "//", "/a."], list("/a.$b"), hi=14)
case("version_or_latest", r"([$]LATEST|[$]DEFAULT|^[1-9][0-9]*$)", ["$LATEST", "x$DEFAULT", "12", "012", "1a", "a1"],
     list("1 0a$LATEST"))
case("identifier_not_digit_start", r"^(?![0-9_])\w+$|^_\w*[a-zA-Z0-9]\w*$", ["a1", "1a", "_", "__", "_a", "é1", "a-b"],
     list("a1_é-"))
case("cron_word_boundaries", r"cron\((\b[0-5]?[0-9]\b) (\b2[0-3]\b|\b[0-1]?[0-9]\b) (.*){1,5} (.*){1,5} (.*){1,5} (.*){1,5}\)",
     ["cron(0 12 * * ? *)", "cron(60 12 * * ? *)", "cron(5 24 * * ? *)", "cron(05 9 a b c d)", "cron(a5 9 a b c d)"],
     list("cron(059 2*?)a"))
case("s3_bucket_name", r"(?=^.{3,63}$)(?!^(\d+\.)+\d+$)(^(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])$)",
     ["my-bucket", "ab", "abc", "1.2.3.4", "1.2.3.a", "a..b", "a-.b", "-ab", "a" * 63, "a" * 64, "a.b-c.d"],
     list("ab1.-"))
# A leading length lookahead is read as minLength/maxLength beside the rest
# (where no string of the rest holds a newline): with the schema's own
# bounds, open and exact counts, ^ outside it; kept as a lookahead where the
# rest admits a newline or a top-level | ends the lookahead's branch.
case("s3_bucket_name_bounded", r"(?=^.{3,63}$)(?!^(\d+\.)+\d+$)(^(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])$)",
     ["my-bucket", "ab", "abc", "1.2.3.4", "1.2.3.a", "a..b", "a" * 63, "a" * 64, "a.b-c.d"], list("ab1.-"), lo=3, hi=63)
case("length_ahead_anchor_outside", r"^(?=.{2,5}$)[a-z]+(-[a-z]+)*$", ["a", "ab", "a-b", "abcde", "abcdef", "a--b", "-ab"],
     list("ab-\n"))
case("length_ahead_with_bounds", r"^(?=^.{2,8}$)[a-z]+$", ["ab", "abc", "abcd", "abcdef", "abcdefg", "abcdefghi"],
     list("abz\n"), lo=4, hi=6)
case("length_ahead_open", r"(?=^.{3,}$)[a-z]+\d$", ["ab1", "a1", "abc1", "abc", "1", "ab1x"], list("ab1\n"))
case("length_ahead_exact", r"(?=^.{4}$)\d+$", ["1234", "123", "12345", "12a4"], list("12a\n"))
case("length_ahead_rest_has_newline", r"(?=^.{3,5}$)ab", ["ab", "abc", "ab\nc", "xab", "abcdef", "ab\n"], list("abc\n"))
case("length_ahead_one_branch", r"(?=^.{2,3}$)ab|cd", ["ab", "abc", "abcd", "xcd", "cd", "cdefg", "a"], list("abcd\n"))
# '$' inside a group: the end of the string, not of the group (the plain
# converter drops only a '$' after which nothing can be read).
case("end_anchor_in_group", r"^([a-z]+$)", ["ab", "a-", "ab-c", "-ab", "", "abc"], list("ab-"))
case("end_anchor_in_a_branch", r"^(?:ab$|cd)e", ["abe", "ab", "cde", "cdex", "cd", "abcde"], list("abcde"))
case("end_anchor_in_a_repeated_group", r"(a$)+", ["a", "aa", "ab", "ba", "", "b"], list("ab"))
case("end_anchor_in_a_last_branch", r"^(ab|c$)", ["ab", "abc", "c", "cx", "xc", ""], list("abcx"))
case("no_controls_to_the_end", r"^[^\u0000-\u001F\u007F-\u009F\u2028\u2029]*(?![\s\S])",
     ["abc", "a\nb", "a\u2028", "\u0085x", "é", "\t"], list("a\n\u2028\u0085é\t\u007f"), hi=6)
case("not_reserved_names", r"^(?!memoryStrategyId$|actorId$|sessionId$)[a-z][a-z0-9]*$",
     ["actorId", "actorid", "actorIds", "sessionId", "session", "memoryStrategyId", "a1"], list("actorIdsen1"))
case("lookahead_whole_class", r"^(?=^[a-z0-9-]+$).{3,64}$", ["abc", "ab", "a-1", "ab_c", "ABC", "a" * 65],
     list("a1-_A."))
case("trimmed", r"^\S([\s\S]*\S)?(?![\s\S])", ["a", " a", "a ", "a b", "", "a\n", "ab"], list("a \n\t"))
case("no_star_question", r"^(?!.*\*\?).*$", ["a*?", "a?*", "*", "?", "a*b?", ""], list("a*?\n"))
case("word_boundaries", r"\bcat\b", ["cat", "a cat", "cats", "bobcat", "cat.", "_cat", "écat", "cat1"],
     list("cat s_é.1"))
case("not_boundaries", r"\Bx\B", ["axb", "x", "ax", "a x b", "éxé", "_x_"], list("ax b_é"))
case("lookahead_then_word", r"foo(?=bar)", ["foobar", "foo", "foobaz", "xfoobarx", "fobar"], list("fobarz"))
case("unanchored_negative", r"(?!a)b", ["b", "ab", "bb", "a", ""], list("abc"))
case("anchors_in_groups", r"(^|,)ab(,|$)", ["ab", "x,ab", "ab,x", "xab", "abx", ",ab,", "a,b"], list("ab,x"))
case("a_z_anchors", r"\A[0-9a-zA-Z-_]+\Z", ["abc", "a b", "", "a\n", "A-_9"], list("a-_ \n"))
case("not_aws_bounded", r"^(?!aws:)[a-z:]*$", ["aws:", "aw", "awsx", "a:b", "aws"], list("aws:x"), lo=2, hi=6)
case("word_start_bounded", r"\bab", ["ab", " ab", "cab", "ab ab", "x ab"], list("ab c"), hi=5)
# not {pattern}: Buildkite's secret names (no `buildkite` or `bk` prefix, any case).
case("not_pattern_prefix", r"^[A-Za-z][A-Za-z0-9_]*$", ["deploy_key", "bk_x", "BK", "Buildkite1", "buildkit", "b", "_a"],
     list("bBkKuildte_1"), lo=1, hi=12, extra={"not": {"pattern": "^([Bb][Uu][Ii][Ll][Dd][Kk][Ii][Tt][Ee]|[Bb][Kk])"}})
case("not_pattern_alone", None, ["abc", "a.b", "..", ".", ""], list("ab."), extra={"not": {"pattern": r"\.\."}})

judged_goldens.write(OUT, "tools/oracle/regex_assertion_goldens.py", CASES, ensure_ascii=False)
