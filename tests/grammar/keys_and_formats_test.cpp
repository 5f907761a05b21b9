// Keywords whose grammar meets, complements or intersects key and string
// languages (regex_dfa.h's product): patternProperties beside properties,
// required and additionalProperties, unevaluatedProperties beside allOf and
// $ref, a format beside a pattern, not {anyOf: [{pattern}, ...]}, and
// format: regex. The language is checked against `jsonschema`'s verdicts
// (tests/grammar/golden/keys_and_formats.json from
// tools/oracle/keys_and_formats_goldens.py), the masks token by token
// against the matcher, and the refusals by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/regex_dfa.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::single_bytes;
using testing_masks::small_alphabet;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("keys_and_formats.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

std::string error_of(const nlohmann::ordered_json& schema, const SchemaOptions& options = kCompact) {
  try {
    (void)Grammar::from_json_schema(schema, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KeysAndFormats, AcceptsExactlyWhatJsonschemaValidates) {
  testing_masks::Verdicts n;
  for (const auto& vocab : {single_bytes(), small_alphabet()})
    n += testing_masks::expect_jsonschema_verdicts(golden()["cases"], kCompact, vocab);
  EXPECT_GE(n.checked, 2000);
  EXPECT_GE(n.valid, 600);
}

TEST(KeysAndFormats, MasksMatchTheMatcher) {
  const int walks = testing_masks::walk_from_candidates(golden()["cases"], kCompact, small_alphabet(), 11,
                                                        [](size_t i, const auto&) { return i % 8 == 0; });
  EXPECT_GE(walks, 140);
}

// Python's $ also matches before a final newline, ECMA-262's does not: no
// key ending in a newline is written where a pattern has a $ (its kind
// may differ between the readings).
TEST(KeysAndFormats, KeysEndingInANewlineAreLeftOutBesideADollar) {
  const nlohmann::ordered_json schema = {{"type", "object"},
                                         {"patternProperties", {{"^a$", {{"type", "integer"}}}}},
                                         {"additionalProperties", {{"type", "string"}}}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, kCompact), single_bytes());
  EXPECT_TRUE(testing_masks::accepts_document(compiled, R"({"a": 1})"));
  EXPECT_TRUE(testing_masks::accepts_document(compiled, R"({"b": "x"})"));
  EXPECT_FALSE(testing_masks::accepts_document(compiled, R"({"b\n": "x"})"));
  EXPECT_FALSE(testing_masks::accepts_document(compiled, R"({"a\n": 1})"));
  EXPECT_FALSE(testing_masks::accepts_document(compiled, R"({"a\n": "x"})"));
}

// Strict mode (OpenAI's reading): keys no pattern matches are not admitted
// unless additionalProperties says so.
TEST(KeysAndFormats, StrictModeAdmitsOnlyPatternKeys) {
  const nlohmann::ordered_json schema = {{"type", "object"},
                                         {"properties", {{"id", {{"type", "string"}}}}},
                                         {"patternProperties", {{"^x-", {{"type", "integer"}}}}}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, {.any_whitespace = false, .strict = true}),
                                           single_bytes());
  EXPECT_TRUE(testing_masks::accepts_document(compiled, R"({"id": "a", "x-b": 1})"));
  EXPECT_FALSE(testing_masks::accepts_document(compiled, R"({"id": "a", "y": 1})"));
  EXPECT_FALSE(testing_masks::accepts_document(compiled, R"({"x-b": "s"})"));
}

TEST(KeysAndFormats, RefusalsNameTheKeyword) {
  // Five patterns: 32 kinds of key.
  nlohmann::ordered_json five = {{"type", "object"}, {"patternProperties", nlohmann::ordered_json::object()}};
  for (const char* p : {"^a", "^b", "^c", "^d", "^e"}) five["patternProperties"][p] = {{"type", "integer"}};
  EXPECT_NE(error_of(five).find("unsupported 'patternProperties' at #: expected at most 4 patterns"), std::string::npos)
      << error_of(five);
  // A declared key whose schema and pattern's do not merge into one.
  const nlohmann::ordered_json clash = {
      {"properties", {{"ab", {{"pattern", "x"}}}}},
      {"patternProperties", {{"^a", {{"pattern", "y"}}}}},
  };
  EXPECT_NE(error_of(clash).find("unsupported 'patternProperties' at #/patternProperties/^a: declared key 'ab'"),
            std::string::npos)
      << error_of(clash);
  // unevaluatedProperties whose evaluated keys depend on a branch.
  const nlohmann::ordered_json branchy = {
      {"anyOf", {{{"properties", {{"a", {{"type", "string"}}}}}}, {{"properties", {{"b", {{"type", "string"}}}}}}}},
      {"unevaluatedProperties", false}};
  EXPECT_NE(error_of(branchy).find("unsupported 'unevaluatedProperties' at #: the keys it leaves depend on which "
                                   "branch of 'anyOf' holds"),
            std::string::npos)
      << error_of(branchy);
  // A format with no regular form beside a pattern, and format: regex beside a pattern.
  EXPECT_NE(error_of({{"type", "string"}, {"format", "email"}, {"pattern", "a"}})
                .find("unsupported 'pattern' at #: beside format 'email'"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "string"}, {"format", "regex"}, {"pattern", "a"}})
                .find("unsupported 'pattern' at #: beside format 'regex'"),
            std::string::npos);
  // A format and a pattern no string satisfies together.
  EXPECT_NE(error_of({{"type", "string"}, {"format", "date"}, {"pattern", "^x"}})
                .find("no string of format 'date' matches it"),
            std::string::npos);
}

TEST(KeysAndFormats, ProductOfDfas) {
  const RegexDfa a = regex_search_dfa("^a", {}), b = regex_search_dfa("b$", {});
  const RegexDfa names = regex_dfa_of_strings({"ab", "é"});
  const RegexDfa both = regex_dfa_product({&a, &b}, {&names});
  EXPECT_TRUE(regex_dfa_accepts(both, "axb"));
  EXPECT_FALSE(regex_dfa_accepts(both, "ab"));  // a name
  EXPECT_FALSE(regex_dfa_accepts(both, "ba"));
  const RegexDfa neither = regex_dfa_product({}, {&a, &b});
  EXPECT_TRUE(regex_dfa_accepts(neither, ""));
  EXPECT_TRUE(regex_dfa_accepts(neither, "é"));
  EXPECT_FALSE(regex_dfa_accepts(neither, "a"));
  EXPECT_TRUE(regex_dfa_product({&a}, {&a}).states.empty());
  EXPECT_TRUE(regex_dfa_accepts(names, "é"));
  EXPECT_FALSE(regex_dfa_accepts(names, "a"));
}

}  // namespace
}  // namespace brioche::grammar
