// Patterns with Unicode classes (\w, \d, \s: ~700 ranges, hundreds to
// thousands of UTF-8 states) under large minLength/maxLength: one count
// over the whole pattern (Expr::Kind::kLengthBound) whose layers, on
// Llama-3 (a counted window of 128 items), would pass the bound's state
// budget with every class written out in each layer; their large items are
// calls of shared item rules instead (RuleBuilder::item_rule). The language
// is checked against `jsonschema`'s verdicts on candidates at lo - 1 .. lo + 1
// and hi - 1 .. hi + 1 characters with one- to four-byte characters
// (tests/grammar/golden/pattern_length_unicode.json from
// tools/oracle/pattern_length_unicode_goldens.py); Llama-3's masks across
// the bounds are checked token by token against the matcher.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixture_vocab.h"
#include "grammar/automaton.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::mask_mismatches;
using testing_masks::text_of;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("pattern_length_unicode.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

std::shared_ptr<const CompiledGrammar> compile_llama3(const nlohmann::ordered_json& schema) {
  static auto vocab = testing::fixture_vocabulary("llama3");
  return CompiledGrammar::compile(Grammar::from_json_schema(schema, kCompact), vocab);
}

TEST(PatternLengthUnicode, AcceptsExactlyWhatJsonschemaValidates) {
  int checked = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = compile_llama3(c["schema"]);
    const Automaton& a = compiled->automaton();
    EXPECT_GT(a.rule_start.size(), static_cast<size_t>(a.first_item_rule)) << name << ": expected item rules";
    for (const auto& cand : c["candidates"]) {
      const std::string text = text_of(cand["parts"]);
      EXPECT_EQ(testing_masks::accepts_document(compiled, text), cand["valid"].get<bool>())
          << name << ": jsonschema says " << (cand["valid"].get<bool>() ? "valid" : "invalid") << " for " << text.size()
          << " bytes: " << text.substr(0, 80) << (text.size() > 80 ? "..." : "");
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
}

// Every Llama-3 token's bit against the matcher a few steps before each
// bound, where tokens are longer than the characters left (multi-byte
// characters at the bound included).
TEST(PatternLengthUnicode, Llama3MasksAreExactAcrossTheBounds) {
  int walks = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = compile_llama3(c["schema"]);
    uint64_t seed = 5;
    size_t i = 0;
    for (const auto& cand : c["candidates"]) {
      if (i++ % 7 != 0) continue;
      const std::string text = text_of(cand["parts"]);
      if (text.size() <= 6) continue;
      EXPECT_EQ(mask_mismatches(compiled, text.substr(0, text.size() - 6), 3, seed++, name), 0);
      ++walks;
    }
  }
  EXPECT_GE(walks, 20);
}

// A layer of the bound lies as many bytes into the string as the items
// that lead to it, calls of shared item rules included (each reads one
// character): the layers past the first 32 bytes are left to their first
// mask (CompileStats::num_deep_states), as the same layers written out are.
// Counted as no byte, the item calls made every layer look 1-5 bytes deep
// (CloudFormation's `^...|(\$(\.[\w/_-]+...)*)$` under maxLength 256: 73
// eager walks of 1-8 ms each).
// (The bounds of 1024 and 2048 had deep layers before, past their counter;
// those of 200 and 256, written out whole, had none.)
TEST(PatternLengthUnicode, LayersPastTheFirstItemsWaitForTheirFirstMask) {
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = compile_llama3(c["schema"]);
    EXPECT_GT(compiled->stats().num_deep_states, 30) << name;
  }
}

// A token that starts inside a shared item rule (a multi-byte character),
// ends the string and goes on into the caller (`…"\n\n`, `。",\n`) is
// uncertain at the item's call site (the item rule's start has no mask);
// the matcher must walk it from the call site's closure, as the compiler
// did, not from the call site's own byte edges (it was left out: valid
// documents rejected). tests/grammar/golden/item_rule_masks.json from
// tools/oracle/item_rule_mask_goldens.py.
TEST(PatternLengthUnicode, Llama3MasksHoldTokensThatLeaveAnItemAndTheString) {
  const nlohmann::ordered_json g = testing_masks::golden_file("item_rule_masks.json");
  static auto vocab = testing::fixture_vocabulary("llama3");
  const SchemaOptions blanks{.any_whitespace = true, .max_whitespace = 20, .strict = false};
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], blanks), vocab);
    const Automaton& a = compiled->automaton();
    EXPECT_GT(a.rule_start.size(), static_cast<size_t>(a.first_item_rule)) << name << ": expected item rules";
    for (const auto& cand : c["candidates"]) {
      const std::string text = cand["text"].get<std::string>();
      EXPECT_EQ(testing_masks::accepts_document(compiled, text), cand["valid"].get<bool>()) << name << ": " << text;
      ++checked;
    }
    uint64_t seed = 11;
    for (const auto& prefix : c["prefixes"])
      EXPECT_EQ(mask_mismatches(compiled, prefix.get<std::string>(), 2, seed++, name), 0) << prefix;
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace brioche::grammar
