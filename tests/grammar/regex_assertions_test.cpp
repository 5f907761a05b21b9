// `pattern`s with assertions (regex_dfa.h): lookahead (?=X) (?!X), word
// boundaries \b \B, anchors inside groups, \A \Z — alone and with
// minLength/maxLength. The language is checked against `jsonschema`'s
// verdicts (tests/grammar/golden/regex_assertions.json from
// tools/oracle/regex_assertion_goldens.py: the corpus' patterns and one per
// assertion), and the masks token by token against the matcher.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_vocab.h"
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
  static const nlohmann::ordered_json g = testing_masks::golden_file("regex_assertions.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

TEST(RegexAssertions, AcceptsExactlyWhatJsonschemaValidates) {
  testing_masks::Verdicts n;
  for (const auto& vocab : {single_bytes(), small_alphabet()})
    n += testing_masks::expect_jsonschema_verdicts(golden()["cases"], kCompact, vocab);
  EXPECT_GE(n.checked, 4000);
  EXPECT_GE(n.valid, 1500);
}

TEST(RegexAssertions, MasksMatchTheMatcher) {
  const int walks = testing_masks::walk_from_candidates(golden()["cases"], kCompact, small_alphabet(), 5,
                                                        [](size_t i, const auto&) { return i % 16 == 0; });
  EXPECT_GE(walks, 120);
}

// A lookahead at the start makes a tree of repetitions: one expression, so a
// length bound counts it like any pattern (%{m,n}), even a large one.
TEST(RegexAssertions, TreeDfaIsOneExpressionUnderALengthBound) {
  const nlohmann::ordered_json schema = {
      {"type", "string"}, {"pattern", "^(?!aws:)[a-zA-Z0-9:]+$"}, {"minLength", 1}, {"maxLength", 100000}};
  const Grammar g = Grammar::from_json_schema(schema, kCompact);
  EXPECT_NE(g.to_ebnf().find(")%{1,100000}"), std::string::npos) << g.to_ebnf();
  auto compiled = CompiledGrammar::compile(g, small_alphabet());
  GrammarMatcher ok(compiled);
  EXPECT_TRUE(ok.accept_bytes("\"aws" + std::string(99996, 'a') + "\"") && ok.can_terminate());
  GrammarMatcher long_one(compiled);
  EXPECT_FALSE(long_one.accept_bytes("\"aws" + std::string(99998, 'a') + "\""));
  GrammarMatcher reserved(compiled);
  EXPECT_FALSE(reserved.accept_bytes("\"aws:"));
}

// The budget of such an expression counts character classes, not text: the
// tag-key class of \p{L}\p{Z}\p{N} is ~17 KB of ranges, and `(?!aws:.*)`
// writes it once per state of the lookahead (11 classes, 88 KB). Counted in
// bytes (64 KiB) it fell back to one rule per DFA state and length (1,028
// rules, 320k automaton states under maxLength 1024).
TEST(RegexAssertions, ExpressionBudgetCountsClassesNotBytes) {
  const nlohmann::ordered_json schema = {{"type", "string"},
                                         {"pattern", "^(?!aws:.*)([\\p{L}\\p{Z}\\p{N}_.:=+\\/\\-@%]*)$"},
                                         {"minLength", 1},
                                         {"maxLength", 1024}};
  const std::string ebnf = Grammar::from_json_schema(schema, kCompact).to_ebnf();
  EXPECT_NE(ebnf.find(")%{1,1024}"), std::string::npos) << ebnf.substr(0, 400);
  EXPECT_GT(ebnf.size(), size_t{64} << 10);
  const RegexDfa dfa = regex_search_dfa("^(?!aws:)[a-z:]*$", {});
  EXPECT_FALSE(regex_dfa_expression(dfa, true, {.max_classes = 64}).empty());
  EXPECT_TRUE(regex_dfa_expression(dfa, true, {.max_classes = 4}).empty());
}

// A leading `(?=^.{m,n}$)` is a length count: read as minLength/maxLength
// beside the rest (one counted bound), not held by the DFA (one rule per
// state and length). Kept as a lookahead where the rest admits a newline,
// which '.' excludes; bounds that exclude each other leave no string.
TEST(RegexAssertions, LengthLookaheadIsALengthBound) {
  auto ebnf = [](const char* pattern, int64_t lo, int64_t hi) {
    nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
    if (lo > 0) schema["minLength"] = lo;
    if (hi >= 0) schema["maxLength"] = hi;
    return Grammar::from_json_schema(schema, kCompact).to_ebnf();
  };
  const char* bucket =
      "(?=^.{3,63}$)(?!^(\\d+\\.)+\\d+$)(^(([a-z0-9]|[a-z0-9][a-z0-9\\-]*[a-z0-9])\\.)*([a-z0-9]|[a-z0-9][a-z0-9\\-]*"
      "[a-z0-9])$)";
  EXPECT_NE(ebnf(bucket, 3, 63).find(")%{3,63}"), std::string::npos);
  EXPECT_NE(ebnf(bucket, 0, -1).find(")%{3,63}"), std::string::npos);
  EXPECT_NE(ebnf("^(?=.{2,8}$)[a-z]+$", 4, 6).find("{4,6}"), std::string::npos);
  EXPECT_NE(ebnf("(?=^.{4,}$)[a-z]+$", 0, 10).find("{4,10}"), std::string::npos);
  EXPECT_EQ(ebnf("(?=^.{3,5}$)ab", 0, -1).find("{3,5}"), std::string::npos);  // "ab\nc" must stay out
  EXPECT_THROW(ebnf("(?=^.{2,3}$)[a-z]+$", 5, -1), Error);
}

TEST(RegexAssertions, RefusesWhatItCannotDecide) {
  // Inline flags other than (?i), and (?i) beside non-ASCII letters.
  for (const char* p : {"(?<=a)b", "(?<!a)b", "(?=(?!a))b", "(?m)^aws", "^(?!(?i)éws)x", "(a)\\1"}) {
    const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", p}};
    EXPECT_THROW(Grammar::from_json_schema(schema, kCompact), Error) << p;
  }
  // Threads too many to decide in bounded time: refused by the work count.
  try {
    (void)regex_search_dfa("(?=(.{0,50}){0,50}z)", {});
    ADD_FAILURE() << "expected the work budget to refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos) << e.what();
  }
  // A DFA past its budget is refused with the size, not built.
  try {
    (void)regex_search_dfa("(?=.*a).{0,3000}b", {.max_states = 100});
    ADD_FAILURE() << "expected the DFA budget to refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100 states"), std::string::npos) << e.what();
  }
}

// ECMA-262's $ is the very end (Python's also matches before a final
// newline); \Z is the very end in Python.
TEST(RegexAssertions, EndIsTheVeryEnd) {
  const RegexDfa dfa = regex_search_dfa("(?=a$)", {});
  ASSERT_FALSE(dfa.states.empty());
  const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", "(?=a$)"}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, kCompact), single_bytes());
  for (const auto& [text, ok] : std::vector<std::pair<std::string, bool>>{
           {"\"a\"", true}, {"\"ba\"", true}, {"\"a\\n\"", false}, {"\"ab\"", false}}) {
    GrammarMatcher m(compiled);
    EXPECT_EQ(m.accept_bytes(text) && m.can_terminate(), ok) << text;
  }
}

}  // namespace
}  // namespace brioche::grammar
