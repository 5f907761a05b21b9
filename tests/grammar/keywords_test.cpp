// JSON Schema keywords that xgrammar ignores or approximates (so there are
// no mask goldens for them): the grammar must accept exactly the candidate
// documents that `jsonschema` judges valid
// (tests/grammar/golden/schema_keywords.json, tools/oracle/grammar_keyword_goldens.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "fixture_vocab.h"

namespace brioche::grammar {
namespace {

std::shared_ptr<const Vocabulary> single_bytes() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    toks.push_back("");  // EOS
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {256}, .special_ids = {}});
  }();
  return v;
}

TEST(SchemaKeywords, AcceptExactlyWhatJsonschemaValidates) {
  auto golden = nlohmann::ordered_json::parse(
      testing::read_file(std::string(BRIOCHE_SOURCE_DIR) + "/tests/grammar/golden/schema_keywords.json"));
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    Grammar g = Grammar::from_json_schema(c["schema"], SchemaOptions{.any_whitespace = false});
    auto compiled = CompiledGrammar::compile(g, single_bytes());
    for (const auto& cand : c["candidates"]) {
      const std::string text = cand["text"].get<std::string>();
      GrammarMatcher m(compiled);
      const bool accepted = m.accept_bytes(text) && m.can_terminate();
      EXPECT_EQ(accepted, cand["valid"].get<bool>()) << name << ": " << text << "\n" << g.to_ebnf();
      ++checked;
    }
  }
  EXPECT_GE(checked, 80);
}

// The counting rules stay exact with free whitespace too.
TEST(SchemaKeywords, PropertyCountsWithWhitespace) {
  Grammar g = Grammar::from_json_schema(
      std::string(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})"));
  auto compiled = CompiledGrammar::compile(g, single_bytes());
  auto accepts = [&](const std::string& text) {
    GrammarMatcher m(compiled);
    return m.accept_bytes(text) && m.can_terminate();
  };
  EXPECT_TRUE(accepts("{ \"a\" :1 }"));
  EXPECT_TRUE(accepts("{\"a\":1,\n  \"b\":2}"));
  EXPECT_FALSE(accepts("{ }"));
  EXPECT_FALSE(accepts("{\"a\":1,\"b\":2,\"c\":3}"));
}

}  // namespace
}  // namespace brioche::grammar
