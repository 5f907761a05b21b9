// `pattern` with minLength/maxLength where the pattern is not a sequence of
// one-character atoms: one count of characters over the whole pattern
// (`(pattern)%{m,n}`, Expr::Kind::kLengthBound: the product of the pattern's
// automaton and a counter, counted rather than unrolled between the bounds).
// The language is checked against `jsonschema`'s verdicts on candidates a
// few characters around each bound, the length spread over different
// varying parts (tests/grammar/golden/pattern_length.json from
// tools/oracle/pattern_length_goldens.py); the masks near the bounds are
// checked without trusting them, token by token against the matcher.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_vocab.h"
#include "grammar/automaton.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::mask_mismatches;
using testing_masks::single_bytes;
using testing_masks::small_alphabet;
using testing_masks::text_of;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("pattern_length.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

// Over one-byte tokens (a window of 1: the counted layer is used from a
// span of 3 characters between the bounds) and over tokens of up to 4
// characters (window 4).
TEST(PatternLength, AcceptsExactlyWhatJsonschemaValidates) {
  int checked = 0;
  for (const auto& vocab : {single_bytes(), small_alphabet()}) {
    checked += testing_masks::expect_jsonschema_verdicts(
                   golden()["cases"], kCompact, vocab,
                   [](const std::string& name, const Grammar& g, const CompiledGrammar&) {
                     EXPECT_NE(g.to_ebnf().find(")%{"), std::string::npos)
                         << name << ": expected one count over the pattern";
                   })
                   .checked;
  }
  EXPECT_GE(checked, 800);
}

// Bounds far apart are counted: the automaton does not grow with them.
TEST(PatternLength, LargeBoundsAreCountedNotUnrolled) {
  auto schema = [](int64_t hi) {
    return nlohmann::ordered_json{{"type", "string"}, {"pattern", "^a(b|cd)*-[a-z]+$"}, {"maxLength", hi}};
  };
  auto small = CompiledGrammar::compile(Grammar::from_json_schema(schema(2000), kCompact), small_alphabet());
  auto large = CompiledGrammar::compile(Grammar::from_json_schema(schema(2000000000), kCompact), small_alphabet());
  EXPECT_FALSE(large->automaton().counters.empty());
  EXPECT_EQ(small->stats().num_states, large->stats().num_states);
  GrammarMatcher m(large);
  EXPECT_TRUE(m.accept_bytes("\"a" + std::string(5000, 'b') + "cd-" + std::string(5000, 'x') + "\""));
  EXPECT_TRUE(m.can_terminate());
}

TEST(PatternLength, MasksAreExactAcrossTheBounds) {
  int walks = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], kCompact), small_alphabet());
    uint64_t seed = 11;
    size_t i = 0;
    for (const auto& cand : c["candidates"]) {
      if (i++ % 3 != 0) continue;
      const std::string text = text_of(cand["parts"]);
      for (size_t cut : {2, 6, 12})
        if (text.size() > cut) {
          EXPECT_EQ(mask_mismatches(compiled, text.substr(0, text.size() - cut), 8, seed++, name), 0);
          ++walks;
        }
    }
  }
  EXPECT_GE(walks, 300);
}

// On Llama-3's 128k tokens (window 128: the 1600 bound is counted): every
// token's bit around the bound of an ARN-like pattern with two loops, the
// length in its first loop or in its last.
TEST(PatternLength, Llama3MasksAreExactAroundTheBound) {
  auto vocab = testing::fixture_vocabulary("llama3");
  const nlohmann::ordered_json schema = {
      {"type", "string"}, {"pattern", "^arn:aws([a-z]|-)*:[a-z0-9-]+:secret:[a-z]+$"}, {"maxLength", 1600}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, kCompact), vocab);
  EXPECT_FALSE(compiled->automaton().counters.empty());
  const std::string tail = ":us-east-1:secret:";
  for (int64_t total : {1470, 1597, 1600}) {
    const int64_t first = 1000, last = total - 7 - first - int64_t(tail.size());
    const std::string a = "\"arn:aws" + std::string(first, 'a') + tail + std::string(last, 'x');
    EXPECT_EQ(mask_mismatches(compiled, a, 1, 1, "llama3 first loop " + std::to_string(total)), 0);
    const std::string b = "\"arn:aws" + tail + std::string(total - 7 - int64_t(tail.size()), 'y');
    EXPECT_EQ(mask_mismatches(compiled, b, 1, 1, "llama3 last loop " + std::to_string(total)), 0);
  }
}

TEST(PatternLength, EbnfLengthBound) {
  // %{m,n} counts classes and literals matched; it prints and parses back.
  const Grammar g = Grammar::from_ebnf("root ::= ([a-z] | \"-\" [0-9])*%{2,4}\n", "root");
  EXPECT_NE(g.to_ebnf().find("%{2,4}"), std::string::npos);
  auto compiled = CompiledGrammar::compile(Grammar::from_ebnf(g.to_ebnf(), "root"), single_bytes());
  for (const auto& [text, ok] : std::vector<std::pair<std::string, bool>>{{"a", false},
                                                                          {"ab", true},
                                                                          {"-1", true},
                                                                          {"a-1b", true},
                                                                          {"abcd", true},
                                                                          {"abcde", false},
                                                                          {"-1-1a", false}}) {
    GrammarMatcher m(compiled);
    EXPECT_EQ(m.accept_bytes(text) && m.can_terminate(), ok) << text;
  }
  EXPECT_THROW(CompiledGrammar::compile(Grammar::from_ebnf("root ::= (x)%{1,3}\nx ::= \"a\" x | \"b\"\n", "root"),
                                        single_bytes()),
               Error);
}

}  // namespace
}  // namespace brioche::grammar
