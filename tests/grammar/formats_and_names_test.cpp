// The formats uri-reference and duration, propertyNames beside declared
// properties, not {allOf: [object tests]} and conditions beside a type list
// of object and other types: the grammar accepts exactly what `jsonschema` (its format
// checker with rfc3986-validator/rfc3987 and isoduration loaded) validates
// (tests/grammar/golden/formats_and_names.json from
// tools/oracle/formats_and_names_goldens.py), and its masks match the
// matcher token by token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/regex_dfa.h"
#include "grammar/schema_formats.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::single_bytes;
using testing_masks::small_alphabet;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("formats_and_names.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

std::string error_of(const nlohmann::ordered_json& schema) {
  try {
    (void)Grammar::from_json_schema(schema, kCompact);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FormatsAndNames, AcceptsExactlyWhatJsonschemaValidates) {
  testing_masks::Verdicts n;
  for (const auto& vocab : {single_bytes(), small_alphabet()})
    n += testing_masks::expect_jsonschema_verdicts(golden()["cases"], kCompact, vocab);
  EXPECT_GE(n.checked, 3000);
  EXPECT_GE(n.valid, 600);
}

TEST(FormatsAndNames, MasksMatchTheMatcher) {
  const int walks = testing_masks::walk_from_candidates(
      golden()["cases"], kCompact, small_alphabet(), 5,
      [](size_t i, const nlohmann::ordered_json& c) { return i % 8 == 0 && c["valid"].get<bool>(); });
  EXPECT_GE(walks, 30);
}

// CloudFormation's hook alias writes its (?i) inside the lookahead, which
// Python 3.11 refuses (no verdicts to check against); read to the end of
// the group (PCRE's and Java's reading) it is Python's (?i:aws) group,
// whose verdicts the golden has.
TEST(FormatsAndNames, CaseInsensitiveFlagInsideALookaheadReadsToTheGroupsEnd) {
  const auto* at_start = &golden()["cases"][0];
  for (const auto& c : golden()["cases"])
    if (c["name"] == "case_insensitive_group") at_start = &c;
  ASSERT_EQ((*at_start)["name"], "case_insensitive_group");
  const nlohmann::ordered_json inside = {
      {"type", "string"}, {"pattern", "^(?!(?i)aws)[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}::[A-Za-z0-9]{2,8}$"}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(inside, kCompact), single_bytes());
  int valid = 0;
  for (const auto& cand : (*at_start)["candidates"]) {
    const std::string text = cand["text"].get<std::string>();
    EXPECT_EQ(testing_masks::accepts_document(compiled, text), cand["valid"].get<bool>()) << text;
    valid += cand["valid"].get<bool>();
  }
  EXPECT_GE(valid, 15);
}

// \p{Print} (CloudFormation's host key description) is Java's POSIX class,
// printable ASCII; Python's re has none, so the golden judges [ -~].
TEST(FormatsAndNames, PrintClassIsPrintableAscii) {
  const auto* ascii = &golden()["cases"][0];
  for (const auto& c : golden()["cases"])
    if (c["name"] == "print_class_as_ascii") ascii = &c;
  ASSERT_EQ((*ascii)["name"], "print_class_as_ascii");
  const nlohmann::ordered_json print = {{"type", "string"}, {"pattern", "^[\\p{Print}]*$"}, {"maxLength", 200}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(print, kCompact), single_bytes());
  int valid = 0;
  for (const auto& cand : (*ascii)["candidates"]) {
    const std::string text = cand["text"].get<std::string>();
    EXPECT_EQ(testing_masks::accepts_document(compiled, text), cand["valid"].get<bool>()) << text;
    valid += cand["valid"].get<bool>();
  }
  EXPECT_GE(valid, 6);
}

// uri-reference is written once, as a regex (format_regex), with its IP
// literal in one place: the EBNF is read from it, and the language beside a
// pattern (the format's DFA times the pattern's) is the same regex's.
TEST(FormatsAndNames, UriReferenceIsWrittenOnce) {
  const std::string ebnf = format_ebnf("uri-reference");
  EXPECT_EQ(ebnf, regex_to_ebnf_expr(format_regex("uri-reference"), /*inside_json_string=*/true));
  size_t literals = 0;
  for (size_t at = ebnf.find("\"[\""); at != std::string::npos; at = ebnf.find("\"[\"", at + 1)) ++literals;
  EXPECT_EQ(literals, 1u) << ebnf;
  const RegexDfa dfa = regex_search_dfa("^(?:" + format_regex("uri-reference") + ")$", {});
  for (const char* ok : {"//[::1]/a.yml", "http://[v1.x]:80/p?q#f", "a/b", ""})
    EXPECT_TRUE(regex_dfa_accepts(dfa, ok)) << ok;
  for (const char* bad : {"//[::1/a.yml", "//[1::2::3]", "a b", "%zz"})
    EXPECT_FALSE(regex_dfa_accepts(dfa, bad)) << bad;
}

TEST(FormatsAndNames, RefusalsNameTheKeyword) {
  // (?i) beside non-ASCII letters (their case needs Unicode's tables).
  EXPECT_THROW((void)regex_search_dfa("(?i)^é", {}), Error);
  EXPECT_NE(error_of({{"type", "string"}, {"pattern", "(?i)^é"}}).find("unsupported 'pattern' at #"), std::string::npos)
      << error_of({{"type", "string"}, {"pattern", "(?i)^é"}});
  // duration has no regular form beside a pattern, nor a counted length;
  // uri-reference's length is counted (format_length_test.cpp).
  EXPECT_NE(error_of({{"type", "string"}, {"format", "duration"}, {"pattern", "^P"}})
                .find("unsupported 'pattern' at #: beside format 'duration'"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "string"}, {"format", "duration"}, {"maxLength", 20}})
                .find("unsupported 'maxLength' at #: beside format 'duration'"),
            std::string::npos);
  EXPECT_EQ(error_of({{"type", "string"}, {"format", "uri-reference"}, {"maxLength", 20}}), "");
  // A required key the names refuse: nothing is valid.
  EXPECT_NE(error_of({{"type", "object"}, {"required", {"b"}}, {"propertyNames", {{"pattern", "^a"}}}})
                .find("unsupported 'required' at #: 'b' is required and propertyNames refuses it"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "object"},
                      {"properties", {{"b", {{"type", "string"}}}}},
                      {"required", {"b"}},
                      {"propertyNames", {{"enum", {"a"}}}}})
                .find("unsupported 'required' at #: 'b' is required and its schema is false"),
            std::string::npos);
  // Names read only as a language of keys.
  EXPECT_NE(error_of({{"type", "object"},
                      {"properties", {{"a", {{"type", "string"}}}}},
                      {"propertyNames", {{"anyOf", {{{"pattern", "^a"}}, {{"pattern", "^b"}}}}}}})
                .find("unsupported 'propertyNames' at #/propertyNames: 'anyOf' beside declared properties"),
            std::string::npos);
}

}  // namespace
}  // namespace brioche::grammar
