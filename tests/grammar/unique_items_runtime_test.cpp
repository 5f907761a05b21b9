// uniqueItems over items no grammar can enumerate (strings, objects, numbers,
// nested arrays, any value), checked at run time by the matcher
// (unique_items.h): the verdicts of jsonschema 4.26
// (tools/oracle/unique_items_goldens.py -> tests/grammar/golden/unique_items.json),
// and every token's mask bit against what the matcher accepts at every step
// (no mask trusted), on tokens cut from the candidates themselves (tokens
// that close a repeated string and go on, `a", "`) and on Llama-3's.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/json_canonical.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

const SchemaOptions kCorpusOptions{.any_whitespace = true, .max_whitespace = 20, .strict = false};

nlohmann::ordered_json goldens() { return testing_masks::golden_file("unique_items.json"); }

// Single bytes (so every candidate can be written) and every 2..4-byte
// piece of the candidates; id 0 is EOS.
std::shared_ptr<const Vocabulary> pieces_of(const nlohmann::ordered_json& candidates) {
  std::set<std::string> pieces;
  for (const auto& c : candidates) {
    const std::string t = c["text"].get<std::string>();
    for (size_t i = 0; i < t.size(); ++i)
      for (size_t n = 2; n <= 4 && i + n <= t.size(); ++n) pieces.insert(t.substr(i, n));
  }
  std::vector<std::string> tokens{""};
  for (int b = 1; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const std::string& p : pieces) tokens.push_back(p);
  return std::make_shared<const Vocabulary>(std::move(tokens), VocabularyOptions{.eos_ids = {0}, .special_ids = {}});
}

// Each token's bit against accept_token (then rolled back), and EOS against
// can_terminate. Returns the number of differences (each reported).
int check_mask(GrammarMatcher& m, const Vocabulary& v, const std::string& where) {
  std::vector<uint32_t> mask(v.num_words());
  m.fill_next_token_bitmask(mask.data());
  int wrong = 0;
  for (int32_t id = 0; id < v.num_tokens(); ++id) {
    const bool bit = (mask[id >> 5] >> (id & 31) & 1) != 0;
    bool accepted = false;
    if (std::find(v.eos_ids().begin(), v.eos_ids().end(), id) != v.eos_ids().end()) {
      accepted = m.can_terminate();
    } else if (m.accept_token(id)) {
      accepted = true;
      m.rollback(1);
    }
    if (bit != accepted && ++wrong <= 5)
      ADD_FAILURE() << where << ": token '" << v.token(id) << "' mask " << bit << ", accept_token " << accepted;
  }
  return wrong;
}

TEST(UniqueItemsRuntime, VerdictsAreJsonschemas) {
  auto bytes = testing_masks::single_bytes();
  const auto golden = goldens();
  ASSERT_EQ(golden["cases"].size(), 13u);
  for (const auto& c : golden["cases"]) {
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], kCorpusOptions), bytes);
    for (const auto& cand : c["candidates"]) {
      const std::string text = cand["text"].get<std::string>();
      const bool accepted = testing_masks::accepts_document(compiled, text);
      EXPECT_EQ(accepted, cand["valid"].get<bool>()) << c["name"] << ": " << text;
    }
  }
}

TEST(UniqueItemsRuntime, MaskBitsAgreeWithTheMatcherAtEveryStep) {
  const auto golden = goldens();
  for (const auto& c : golden["cases"]) {
    auto vocab = pieces_of(c["candidates"]);
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], kCorpusOptions), vocab);
    for (const auto& cand : c["candidates"]) {
      const std::string text = cand["text"].get<std::string>();
      GrammarMatcher m(compiled);
      int wrong = 0;
      for (size_t i = 0; i <= text.size() && wrong == 0; ++i) {
        wrong += check_mask(m, *vocab, c["name"].get<std::string>() + " " + text + " after " + text.substr(0, i));
        if (i < text.size() && !m.accept_token(static_cast<uint8_t>(text[i]))) break;  // ids 1..255 are bytes
      }
    }
  }
}

// Rollback across an item's end forgets the item: the text positions and
// values of undone steps are gone.
TEST(UniqueItemsRuntime, RollbackAcrossAnItemEnd) {
  const nlohmann::ordered_json schema = {{"type", "array"}, {"items", {{"type", "string"}}}, {"uniqueItems", true}};
  auto compiled =
      CompiledGrammar::compile(Grammar::from_json_schema(schema, kCorpusOptions), testing_masks::single_bytes());
  GrammarMatcher m(compiled);
  ASSERT_TRUE(m.accept_bytes("[\"a"));
  ASSERT_TRUE(m.accept_bytes("b\", \""));  // "ab" ends here
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.accept_bytes("\""));  // "ab" again
  m.rollback(2);                       // back to ["a: "ab" never ended
  ASSERT_TRUE(m.accept_bytes("\", \"ab\", \"a"));
  EXPECT_FALSE(m.accept_bytes("\""));   // "a" again
  EXPECT_FALSE(m.accept_bytes("b\""));  // "ab" again
  ASSERT_TRUE(m.accept_bytes("bc\"]"));
  EXPECT_TRUE(m.can_terminate());
  m.rollback(1);  // back to ["a", "ab", "a
  EXPECT_FALSE(m.accept_bytes("\""));
  ASSERT_TRUE(m.accept_bytes("c\"]"));
  EXPECT_TRUE(m.can_terminate());
}

// Llama-3's tokens inside and around repeated items: every token's bit
// against the matcher (tokens such as `ab"` that end a repeated string, and
// `"]`, `",` that end it and go on).
TEST(UniqueItemsRuntime, Llama3MaskBitsAgreeWithTheMatcher) {
  auto vocab = testing::fixture_vocabulary("llama3");
  const std::vector<std::pair<nlohmann::ordered_json, std::vector<std::string>>> cases = {
      {{{"type", "array"}, {"items", {{"type", "string"}}}, {"uniqueItems", true}},
       {"[\"ab\", \"a", "[\"ab\", \"ab", "[\"ab\", \"", "[\"ab\",", "[\"the\", \"", "[\"x\", \"y\", \"x"}},
      {{{"type", "array"}, {"items", {{"type", "object"}}}, {"uniqueItems", true}},
       {"[{\"a\": 1}, {\"a\": 1", "[{\"a\": 1}, {\"a\": 1.0", "[{}, {"}},
      {{{"type", "array"}, {"items", {{"type", "integer"}}}, {"uniqueItems", true}}, {"[12, 1", "[7, "}},
      // A bounded integer ends at its last digit: "2" there would repeat 12.
      {{{"type", "array"}, {"items", {{"type", "integer"}, {"maximum", 99}}}, {"uniqueItems", true}},
       {"[12, 1", "[12, ", "[7, 12, 7"}},
  };
  for (const auto& [schema, prefixes] : cases) {
    auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, kCorpusOptions), vocab);
    for (const std::string& prefix : prefixes) {
      GrammarMatcher m(compiled);
      ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
      EXPECT_EQ(check_mask(m, *vocab, schema.dump() + " after " + prefix), 0);
    }
  }
}

TEST(UniqueItemsRuntime, CanonicalFormsCompareAsJsonschemaDoes) {
  auto form = [](const std::string& text) {
    std::string out;
    EXPECT_TRUE(canonical_json(text, out)) << text;
    return out;
  };
  EXPECT_EQ(form("1"), form("1.0"));
  EXPECT_EQ(form("1"), form(" 1e0 "));
  EXPECT_EQ(form("0"), form("-0.0"));
  EXPECT_EQ(form("10000000000000000000000"), form("1e22"));
  EXPECT_NE(form("100000000000000000000000"), form("1e23"));  // 1e23 is not exactly representable
  EXPECT_NE(form("true"), form("1"));
  EXPECT_EQ(form(R"({"a":1,"b":[2,"x"]})"), form(R"({ "b" : [ 2.0 , "\u0078" ], "a" : 1 })"));
  EXPECT_EQ(form(R"("\ud83d\ude00")"), form("\"\xF0\x9F\x98\x80\""));
  EXPECT_NE(form(R"("\ud83d")"), form(R"("\ude00")"));
  EXPECT_EQ(form(R"({"a":1,"a":2})"), form(R"({"a":2})"));
  EXPECT_NE(form(R"(["a"])"), form(R"("a")"));
  std::string out;
  EXPECT_FALSE(canonical_json("[1,", out));
  EXPECT_FALSE(canonical_json("1 2", out));
}

}  // namespace
}  // namespace brioche::grammar
