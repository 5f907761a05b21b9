// Front ends and matcher behaviour on a small byte vocabulary: parse
// errors, schema errors, choice escaping, regex features, rollback,
// termination, jump-forward, cache and budgets.
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar {
namespace {

// Every single byte, a few multi-byte tokens, and an EOS at the end.
std::shared_ptr<const Vocabulary> byte_vocab() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t :
         {"\"",  "true", "false", "null", "{\"",      "\":",  "\",",  "\"}",   "ab", "abc",   "yes", "no",
          " \"", "\n\n", "  ",    "12",   "\xC3\xA9", "\xC3", "\xA9", "hello", "//", "2024-", "-01"})
      toks.push_back(t);
    toks.push_back("");  // EOS
    int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {eos}, .special_ids = {}});
  }();
  return v;
}

int32_t eos_id() { return byte_vocab()->num_tokens() - 1; }

GrammarMatcher matcher_for(const Grammar& g) { return GrammarMatcher(CompiledGrammar::compile(g, byte_vocab())); }

bool accepts(const Grammar& g, const std::string& text) {
  GrammarMatcher m = matcher_for(g);
  return m.accept_bytes(text) && m.can_terminate();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Ebnf, ParsesGbnfAndXgrammarSyntax) {
  Grammar g = Grammar::from_ebnf(R"(
    # comment
    root ::= greeting ("," ws name){1,2} "!"?
    greeting ::= "hi" | 'hey'
    name ::= [A-Z] [a-z]+
    ws ::= [ \t]*
  )");
  EXPECT_TRUE(accepts(g, "hi, Ann"));
  EXPECT_TRUE(accepts(g, "hey,Bob, Cy!"));
  EXPECT_FALSE(accepts(g, "hi"));
  EXPECT_FALSE(accepts(g, "hi, Ann, Bob, Cy"));
  EXPECT_FALSE(accepts(g, "hi, ann"));
}

TEST(Ebnf, EscapesClassesAndDot) {
  Grammar g = Grammar::from_ebnf(R"(root ::= "\x41\u00e9\n" [^\]\-a] . [\u0100-\U0010FFFF])");
  EXPECT_TRUE(accepts(g, "A\xC3\xA9\nbz\xC4\x80"));
  EXPECT_FALSE(accepts(g, "A\xC3\xA9\n]z\xC4\x80"));
  EXPECT_FALSE(accepts(g, "A\xC3\xA9\n-z\xC4\x80"));
  EXPECT_FALSE(accepts(g, "A\xC3\xA9\nbzz"));
}

TEST(Ebnf, ErrorsSayWhere) {
  EXPECT_NE(error_of([] { Grammar::from_ebnf("root ::= \"abc"); }).find("1:10"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_ebnf("root ::= foo"); }).find("'foo' is referenced"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_ebnf("start ::= \"a\""); }).find("root rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_ebnf("root ::= [b-a]"); }).find("lo <= hi"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_ebnf("root ::= \"a\"{3,1}"); }).find("m <= n"), std::string::npos);
  // Left recursion is reported, not looped on.
  std::string left = error_of([] { matcher_for(Grammar::from_ebnf("root ::= root \"a\" | \"b\"")); });
  EXPECT_NE(left.find("left recursion"), std::string::npos) << left;
}

TEST(Ebnf, PrintsBackToEquivalentGrammar) {
  Grammar g = Grammar::from_ebnf(R"(root ::= ("a" | [x-z\n]){2,3} b*
b ::= "\"q\"" )");
  Grammar again = Grammar::from_ebnf(g.to_ebnf());
  for (std::string s : {"ax", "aza\"q\"", "a", "axyz", "z\n\"q\"\"q\""})
    EXPECT_EQ(accepts(g, s), accepts(again, s)) << s;
}

TEST(Choices, EscapesEverything) {
  Grammar g = Grammar::from_choices({"yes", "say \"hi\"", "back\\slash", "two\nlines", "tab\there"});
  EXPECT_TRUE(accepts(g, "say \"hi\""));
  EXPECT_TRUE(accepts(g, "back\\slash"));
  EXPECT_TRUE(accepts(g, "two\nlines"));
  EXPECT_TRUE(accepts(g, "tab\there"));
  EXPECT_FALSE(accepts(g, "say hi"));
  EXPECT_TRUE(accepts(Grammar::from_ebnf(g.to_ebnf()), "two\nlines"));
  EXPECT_NE(error_of([] { Grammar::from_choices({}); }).find("at least one"), std::string::npos);
}

TEST(Regex, ClassesEscapesQuantifiersAnchors) {
  Grammar phone = Grammar::from_regex(R"(^\(\d{3}\) \d{3}-\d{4}$)");
  EXPECT_TRUE(accepts(phone, "(555) 123-4567"));
  EXPECT_FALSE(accepts(phone, "(555) 123-456"));
  Grammar w = Grammar::from_regex(R"((?:ab|c)+\s?\w*[^\d\s]{1,2}.)");
  EXPECT_TRUE(accepts(w, "abcab x_9zz\n"));
  EXPECT_TRUE(accepts(w, "c\t__\xC3\xA9!"));
  EXPECT_FALSE(accepts(w, "ab 12"));
  EXPECT_TRUE(accepts(Grammar::from_regex("a|b|"), ""));
  EXPECT_NE(error_of([] { Grammar::from_regex("(?=a)b"); }).find("lookaround"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_regex("(a)\\1"); }).find("backreferences"), std::string::npos);
  EXPECT_NE(error_of([] { Grammar::from_regex("a{2,1}"); }).find("m <= n"), std::string::npos);
}

// JSON Schema: unknown keywords are annotations. Real-world schemas carry
// draft-04 ids, hyper-schema links, vendor extensions and private keys; they
// constrain nothing and change nothing in the grammar.
TEST(JsonSchema, UnknownKeywordsAreAnnotations) {
  const std::string plain =
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name"]})";
  const std::string annotated =
      R"({"id":"http://x/s#","self":{"vendor":"a"},"links":[{"rel":"self"}],"x-kubernetes-group-version-kind":[{}],
          "type":"object","readonly":true,"_format":"q","uniqueItems":false,
          "properties":{"name":{"type":"string","x-kubernetes-patch-merge-key":"name","_uniqueItems":true},
                        "n":{"type":"integer","javaType":"Long"}},"required":["name"]})";
  EXPECT_EQ(Grammar::from_json_schema(annotated).to_ebnf(), Grammar::from_json_schema(plain).to_ebnf());
  const auto allof = Grammar::from_json_schema(
      std::string(R"({"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"x-note":"one"},)"
                  R"({"properties":{"b":{"type":"integer"}},"x-note":"two"}]})"));
  EXPECT_TRUE(accepts(allof, R"({"a":"s","b":1})"));
}

// Required keys not in `properties` come in `required` order (they came
// sorted, rejecting the documents that list them as the schema does).
TEST(JsonSchema, UndeclaredRequiredKeysKeepTheirOrder) {
  const Grammar g = Grammar::from_json_schema(std::string(R"({"type":"object","required":["zeta","alpha"]})"));
  EXPECT_TRUE(accepts(g, R"({"zeta":1,"alpha":2})"));
}

// A tree type whose children refer back through allOf compiles to a
// recursive rule (it used to unroll until the depth limit refused it).
TEST(JsonSchema, RecursiveTypeThroughAllOf) {
  const Grammar g = Grammar::from_json_schema(
      std::string(R"({"$defs":{"Foo":{"type":"object","properties":{"name":{"type":"string"},)"
                  R"("childFoos":{"type":"array","items":{"allOf":[{"$ref":"#/$defs/Foo"}]}}},"required":["name"]}},)"
                  R"("$ref":"#/$defs/Foo"})"));
  EXPECT_TRUE(accepts(g, R"({"name":"a","childFoos":[{"name":"b","childFoos":[{"name":"c"}]}]})"));
  EXPECT_FALSE(accepts(g, R"({"name":"a","childFoos":[{"childFoos":[]}]})"));
}

// JSON Schema patterns are searches: an unanchored end admits anything.
TEST(JsonSchema, PatternsAreSearchesUnlessAnchored) {
  auto schema = [](const char* pattern) {
    return Grammar::from_json_schema(nlohmann::json{{"type", "string"}, {"pattern", pattern}}.dump());
  };
  EXPECT_TRUE(accepts(schema("^https?://"), R"("https://example.com/a")"));
  EXPECT_FALSE(accepts(schema("^https?://"), R"("ftp://x")"));
  EXPECT_TRUE(accepts(schema("[0-9]"), R"("abc1def")"));
  EXPECT_FALSE(accepts(schema("[0-9]"), R"("abcdef")"));
  EXPECT_TRUE(accepts(schema("\\.json$"), R"("a.json")"));
  EXPECT_FALSE(accepts(schema("\\.json$"), R"("a.json5")"));
  EXPECT_TRUE(accepts(schema("^[a-z]+$"), R"("abc")"));
  EXPECT_FALSE(accepts(schema("^[a-z]+$"), R"("ab1")"));
  EXPECT_TRUE(accepts(schema("a\\$"), R"("xa$y")"));  // an escaped '$' is a literal, not an anchor
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithPointer) {
  auto err = [](const char* schema) { return error_of([&] { Grammar::from_json_schema(std::string(schema)); }); };
  std::string e = err(R"({"type":"object","properties":{"a":{"type":"array","prefixItems":[{}],"uniqueItems":true}}})");
  EXPECT_NE(e.find("'uniqueItems'"), std::string::npos) << e;
  EXPECT_NE(e.find("#/properties/a"), std::string::npos) << e;
  e = err(R"({"type":"object","not":{"minProperties":2}})");  // a not the grammar cannot say
  EXPECT_NE(e.find("'not' at #"), std::string::npos) << e;
  EXPECT_NE(e.find("not {minProperties}"), std::string::npos) << e;
  e = err(R"({"type":"string","pattern":"^a","not":{"const":"ab"}})");
  EXPECT_NE(e.find("'not' at #"), std::string::npos) << e;
  e = err(R"({"type":"null","not":{"type":"null"}})");
  EXPECT_NE(e.find("matches nothing"), std::string::npos) << e;
  e = err(R"({"type":"string","format":"iri"})");
  EXPECT_NE(e.find("'format'"), std::string::npos) << e;
  e = err(R"({"$ref":"#/$defs/missing"})");
  EXPECT_NE(e.find("does not resolve"), std::string::npos) << e;
  e = err(R"({"type":"number","minimum":0.5,"maximum":0.25})");
  EXPECT_NE(e.find("'minimum'"), std::string::npos) << e;
  e = err(R"({"type":"object","properties":{"a":{"dependentRequired":{"a":["b"]}}}})");
  EXPECT_NE(e.find("'dependentRequired' at #/properties/a"), std::string::npos) << e;
  e = err(R"({"if":{"type":"string"},"then":{"maxLength":2}})");
  EXPECT_NE(e.find("'if' at #"), std::string::npos) << e;
  e = err(R"({"type":"integer","multipleOf":3,"minimum":1})");
  EXPECT_NE(e.find("'multipleOf'"), std::string::npos) << e;
  e = err(R"({"type":"number","multipleOf":0.3})");
  EXPECT_NE(e.find("'multipleOf'"), std::string::npos) << e;
  e = err(R"({"type":"object","properties":{"a":{}},"propertyNames":{"format":"email"}})");
  EXPECT_NE(e.find("'propertyNames' at #/propertyNames: 'format' beside declared properties"), std::string::npos) << e;
  e = err(R"({"type":"object","patternProperties":{"^a":{},"^b":{},"^c":{},"^d":{},"^e":{}}})");
  EXPECT_NE(e.find("'patternProperties'"), std::string::npos) << e;
  e = err(R"({"type":"string","pattern":"^(?=a)b+$","maxLength":4})");  // a lookahead: refused, bounds or not
  EXPECT_NE(e.find("'pattern'"), std::string::npos) << e;
  e = err(R"({"type":"string","pattern":"^[a-z]{5}$","maxLength":4})");
  EXPECT_NE(e.find("no string matches"), std::string::npos) << e;
  e = err(R"({"type":"string","format":"duration","maxLength":20})");
  EXPECT_NE(e.find("'maxLength'"), std::string::npos) << e;
  e = err(R"({"type":"object","properties":{"a":{}},"additionalProperties":false,"minProperties":2})");
  EXPECT_NE(e.find("'minProperties'"), std::string::npos) << e;
  EXPECT_NE(err("{not json").find("valid JSON"), std::string::npos);
}

TEST(JsonSchema, LanguageOfCommonKeywords) {
  SchemaOptions compact{.any_whitespace = false};
  Grammar g = Grammar::from_json_schema(
      std::string(R"({"type":"object","properties":{"n":{"type":"integer","minimum":-3,"maximum":12},
      "s":{"type":"string","minLength":1,"maxLength":3},"e":{"enum":["a\"b",1,null]},
      "t":{"type":["boolean","null"]}},"required":["n"],"additionalProperties":false})"),
      compact);
  EXPECT_TRUE(accepts(g, R"({"n": -3})"));
  EXPECT_TRUE(accepts(g, R"({"n": 12, "s": "\u00e9x", "e": "a\"b", "t": null})"));
  EXPECT_FALSE(accepts(g, R"({"n": 13})"));
  EXPECT_FALSE(accepts(g, R"({"n": -0})"));
  EXPECT_FALSE(accepts(g, R"({"n": 05})"));
  EXPECT_FALSE(accepts(g, R"({"n": 1, "s": ""})"));
  EXPECT_FALSE(accepts(g, R"({"n": 1, "s": "abcd"})"));
  EXPECT_FALSE(accepts(g, R"({"s": "a"})"));
  EXPECT_FALSE(accepts(g, R"({"n": 1, "x": 1})"));
  EXPECT_FALSE(accepts(g, R"({"n":1})"));  // compact separators are fixed

  Grammar num = Grammar::from_json_schema(std::string(R"({"type":"number","minimum":-1,"exclusiveMaximum":2})"));
  for (std::string ok : {"-1", "-1.0", "-0.5", "0", "1.999", "1"}) EXPECT_TRUE(accepts(num, ok)) << ok;
  for (std::string bad : {"-1.5", "2", "2.0", "-2", "10"}) EXPECT_FALSE(accepts(num, bad)) << bad;

  Grammar extra = Grammar::from_json_schema(std::string(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})"));
  EXPECT_TRUE(accepts(extra, R"({"a": 1, "ab": "x", "b": "y"})"));
  EXPECT_FALSE(accepts(extra, R"({"a": 1, "a": "x"})"));  // declared key cannot come back as extra
  EXPECT_TRUE(accepts(extra, R"({"b": "y"})"));

  Grammar ws = Grammar::from_json_schema(std::string(R"({"type":"array","items":{"type":"integer"}})"),
                                         SchemaOptions{.any_whitespace = true, .max_whitespace = 3});
  EXPECT_TRUE(accepts(ws, "[ \n\t1,2   ]"));
  EXPECT_FALSE(accepts(ws, "[    1]"));  // four blanks in a row: over the bound
}

TEST(JsonSchema, RecursiveRefsAndFormats) {
  Grammar tree =
      Grammar::from_json_schema(std::string(R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"})"));
  EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"w":2}]})"));
  auto fmt = [](const char* f) {
    return Grammar::from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"format", f}});
  };
  EXPECT_TRUE(accepts(fmt("date-time"), "\"2024-02-29T23:59:59.5+05:30\""));
  // No leap second: validators reject second 60 (schema_formats.cpp).
  EXPECT_FALSE(accepts(fmt("date-time"), "\"2024-02-29T23:59:60.5+05:30\""));
  EXPECT_FALSE(accepts(fmt("time"), "\"23:59:60Z\""));
  EXPECT_FALSE(accepts(fmt("date"), "\"2024-13-01\""));
  EXPECT_FALSE(accepts(fmt("date-time"), "\"2023-02-29T10:00:00Z\""));
  EXPECT_TRUE(accepts(fmt("date-time"), "\"2000-02-29T10:00:00Z\""));
  EXPECT_TRUE(accepts(fmt("uuid"), "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(accepts(fmt("ipv4"), "\"192.168.0.255\""));
  EXPECT_FALSE(accepts(fmt("ipv4"), "\"256.1.1.1\""));
  EXPECT_TRUE(accepts(fmt("email"), "\"a.b+c@ex-ample.com\""));
  EXPECT_TRUE(accepts(fmt("uri"), "\"https://user@host.org:8080/a/b?q=1#f\""));
  EXPECT_TRUE(accepts(fmt("time"), "\"10:20:30Z\""));
}

// format "date" admits exactly the real calendar dates (what jsonschema's
// format checker accepts): every month 00-13 x day 00-32 of years around
// the leap-year rules, checked against the Gregorian calendar.
TEST(JsonSchema, DateFormatIsTheCalendar) {
  GrammarMatcher m =
      matcher_for(Grammar::from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"format", "date"}}));
  auto is_leap = [](int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; };
  auto days_in = [&](int y, int mo) {
    static const int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return mo == 2 && is_leap(y) ? 29 : kDays[mo - 1];
  };
  int checked = 0;
  for (int y : {0, 1, 4, 96, 100, 400, 1600, 1700, 1800, 1900, 1996, 1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999}) {
    for (int mo = 0; mo <= 13; ++mo) {
      for (int d = 0; d <= 32; ++d) {
        char text[32];
        std::snprintf(text, sizeof text, "\"%04d-%02d-%02d\"", y, mo, d);
        bool real = y >= 1 && mo >= 1 && mo <= 12 && d >= 1 && d <= days_in(y, mo);
        m.reset();
        bool ok = m.accept_bytes(text) && m.can_terminate();
        EXPECT_EQ(ok, real) << text;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 19 * 14 * 33);
}

TEST(Matcher, MaskRollbackTerminationEos) {
  GrammarMatcher m = matcher_for(Grammar::from_ebnf(R"(root ::= "yes" | "no" | "ab" "c"?)"));
  std::vector<uint32_t> mask(m.mask_words());
  auto allowed = [&](const std::string& tok) {
    for (int32_t id = 0; id < byte_vocab()->num_tokens(); ++id)
      if (byte_vocab()->token(id) == tok) return static_cast<bool>(mask[id >> 5] >> (id & 31) & 1);
    return false;
  };
  m.fill_next_token_bitmask(mask.data());
  EXPECT_TRUE(allowed("yes"));
  EXPECT_TRUE(allowed("y"));
  EXPECT_TRUE(allowed("abc"));
  EXPECT_FALSE(allowed("hello"));
  EXPECT_FALSE(mask[eos_id() >> 5] >> (eos_id() & 31) & 1);
  EXPECT_FALSE(m.accept_token(eos_id()));
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.is_terminated());  // "c" may still follow
  m.fill_next_token_bitmask(mask.data());
  EXPECT_TRUE(mask[eos_id() >> 5] >> (eos_id() & 31) & 1);
  EXPECT_TRUE(allowed("c"));
  EXPECT_FALSE(allowed("a"));
  ASSERT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.is_terminated());  // nothing can follow "abc"
  m.rollback(2);
  EXPECT_EQ(m.num_accepted_steps(), 0);
  EXPECT_FALSE(m.accept_bytes("yex"));
  ASSERT_TRUE(m.accept_bytes("no"));
  ASSERT_TRUE(m.accept_token(eos_id()));
  EXPECT_TRUE(m.is_terminated());
  m.fill_next_token_bitmask(mask.data());
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  EXPECT_THROW(m.rollback(5), Error);
}

TEST(Matcher, JumpForwardString) {
  GrammarMatcher m = matcher_for(Grammar::from_json_schema(
      std::string(R"({"type":"object","properties":{"name":{"type":"string"},"kind":{"const":"person"}},
                      "required":["name","kind"]})"),
      SchemaOptions{.any_whitespace = false}));
  EXPECT_EQ(m.find_jump_forward_string(), "{\"name\": \"");
  ASSERT_TRUE(m.accept_bytes("{\"name\": \"Al\""));
  EXPECT_EQ(m.find_jump_forward_string(), ", \"kind\": \"person\"}");
  ASSERT_TRUE(m.accept_bytes(", \"kind\": \"person\"}"));
  EXPECT_EQ(m.find_jump_forward_string(), "");
}

TEST(Matcher, SoleAllowedTokenIsTheOnlyBitOfTheMask) {
  const Vocabulary& v = *byte_vocab();
  auto sole_by_mask = [&](GrammarMatcher& m) {
    std::vector<uint32_t> mask(size_t(m.mask_words()));
    m.fill_next_token_bitmask(mask.data());
    int32_t found = -1, count = 0;
    for (int32_t id = 0; id < v.size(); ++id)
      if (mask[size_t(id) >> 5] & (1u << (id & 31))) found = id, ++count;
    return count == 1 && found != eos_id() ? found : -1;
  };
  // "x" and "q" have no longer token in this vocabulary: each is the only
  // choice; then ten digits and "12" are allowed, then EOS.
  GrammarMatcher m = matcher_for(Grammar::from_ebnf(R"(root ::= "xq" [0-9] | "xq" "abc")"));
  std::vector<uint32_t> scratch(size_t(m.mask_words()));
  int32_t x = m.sole_allowed_token(scratch.data());
  EXPECT_EQ(v.token(x), "x");
  EXPECT_EQ(x, sole_by_mask(m));
  ASSERT_TRUE(m.accept_token(x));
  int32_t q = m.sole_allowed_token(scratch.data());
  EXPECT_EQ(v.token(q), "q");
  ASSERT_TRUE(m.accept_token(q));
  EXPECT_EQ(m.sole_allowed_token(scratch.data()), -1);  // digits, "a", "ab", "abc", "12"
  EXPECT_EQ(sole_by_mask(m), -1);
  ASSERT_TRUE(m.accept_bytes("7"));
  EXPECT_EQ(m.sole_allowed_token(scratch.data()), -1);  // only EOS: never jumped over
  // "abc" is forced, but "a", "ab" and "abc" are all allowed: the model chooses.
  GrammarMatcher n = matcher_for(Grammar::from_ebnf(R"(root ::= "abc" [0-9])"));
  EXPECT_EQ(n.find_jump_forward_string(), "abc");
  EXPECT_EQ(n.sole_allowed_token(scratch.data()), -1);
  ASSERT_TRUE(n.accept_bytes("ab"));
  int32_t c = n.sole_allowed_token(scratch.data());
  EXPECT_EQ(v.token(c), "c");
  EXPECT_EQ(c, sole_by_mask(n));
}

TEST(Matcher, PartialUtf8Tokens) {
  GrammarMatcher m = matcher_for(Grammar::from_ebnf("root ::= [\\u00e0-\\u00ff]+"));
  ASSERT_TRUE(m.accept_bytes("\xC3"));  // half of "é": allowed, not complete
  EXPECT_FALSE(m.can_terminate());
  ASSERT_TRUE(m.accept_bytes("\xA9"));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.accept_bytes("\xC2\xA0"));  // U+00A0 is outside the class
}

TEST(Compiler, CacheIsLruByContent) {
  GrammarCache cache(byte_vocab(), GrammarCacheOptions{.max_entries = 2});
  auto a1 = cache.get(Grammar::from_ebnf("root ::= \"a\""));
  auto a2 = cache.get(Grammar::from_ebnf("root  ::=  \"a\"  # same grammar"));
  EXPECT_EQ(a1.get(), a2.get());
  cache.get(Grammar::from_ebnf("root ::= \"b\""));
  cache.get(Grammar::from_ebnf("root ::= \"c\""));  // evicts "a"
  EXPECT_EQ(cache.size(), 2u);
  auto a3 = cache.get(Grammar::from_ebnf("root ::= \"a\""));
  EXPECT_NE(a1.get(), a3.get());
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(Compiler, BudgetsFailCleanly) {
  CompileLimits tiny_states;
  tiny_states.automaton.max_states = 50;
  tiny_states.automaton.counter_from = INT64_MAX;  // unrolled: 100 copies
  std::string e =
      error_of([&] { CompiledGrammar::compile(Grammar::from_ebnf("root ::= [a-z]{100}"), byte_vocab(), tiny_states); });
  EXPECT_NE(e.find("size budget"), std::string::npos) << e;
  CompileLimits little_work;
  little_work.max_work = 100;
  e = error_of([&] { CompiledGrammar::compile(Grammar::builtin_json(), byte_vocab(), little_work); });
  EXPECT_NE(e.find("work budget of 100 units"), std::string::npos) << e;
}

}  // namespace
}  // namespace brioche::grammar
