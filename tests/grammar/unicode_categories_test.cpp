// Unicode general categories in patterns (\p{L}, \P{M}, \p{gc=...}): the
// grammar accepts exactly the strings the `regex` module's search matches
// within the length bounds (tests/grammar/golden/unicode_categories.json.zst,
// tools/oracle/grammar_unicode_category_goldens.py; jsonschema's `re` has no
// \p, so it cannot judge these), and unknown property names are refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/unicode_categories.h"
#include "grammar/vocabulary.h"
#include "fixture_vocab.h"

namespace brioche::grammar {
namespace {

std::shared_ptr<const Vocabulary> one_byte_tokens() {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
  toks.push_back("");  // EOS
  return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {256}, .special_ids = {}});
}

TEST(UnicodeCategories, PatternsAcceptExactlyWhatTheOracleMatches) {
  const auto golden = nlohmann::ordered_json::parse(
      testing::read_zstd(testing::source_path("tests/grammar/golden/unicode_categories.json.zst")));
  auto vocab = one_byte_tokens();
  int checked = 0, valid = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    auto compiled =
        CompiledGrammar::compile(Grammar::from_json_schema(c["schema"], SchemaOptions{.strict = false}), vocab);
    for (const auto& cand : c["candidates"]) {
      const std::string text = cand["text"].get<std::string>();
      GrammarMatcher m(compiled);
      const bool accepted = m.accept_bytes(text) && m.can_terminate();
      EXPECT_EQ(accepted, cand["valid"].get<bool>()) << name << ": " << text;
      ++checked;
      valid += cand["valid"].get<bool>();
    }
  }
  EXPECT_GE(checked, 5000);
  EXPECT_GE(valid, 500);
}

TEST(UnicodeCategories, NamesAndRefusals) {
  std::vector<std::pair<uint32_t, uint32_t>> a, b;
  ASSERT_TRUE(unicode_category_ranges("L", a));
  ASSERT_TRUE(unicode_category_ranges("gc=Letter", b));
  EXPECT_EQ(a, b);
  ASSERT_TRUE(unicode_category_ranges("General_Category=Nd", b));
  ASSERT_TRUE(unicode_category_ranges("digit", a));
  EXPECT_EQ(a, b);
  EXPECT_FALSE(unicode_category_ranges("Greek", a));  // a script, not a category
  EXPECT_FALSE(unicode_category_ranges("Xx", a));
  EXPECT_FALSE(unicode_category_ranges("Graph", a));  // a POSIX class other than Print
  ASSERT_TRUE(unicode_category_ranges("Print", a));   // Java's POSIX class: printable ASCII
  EXPECT_EQ(a, (std::vector<std::pair<uint32_t, uint32_t>>{{0x20, 0x7E}}));
  // The categories cover every code point exactly once.
  uint64_t total = 0;
  for (const char* group : {"L", "M", "N", "P", "S", "Z", "C"}) {
    ASSERT_TRUE(unicode_category_ranges(group, a));
    for (auto [lo, hi] : a) total += hi - lo + 1;
  }
  EXPECT_EQ(total, 0x110000u);
  auto error_of = [](const std::string& schema) -> std::string {
    try {
      Grammar::from_json_schema(schema);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string script = R"({"type":"string","pattern":"^\\p{Script=Greek}+$"})";
  EXPECT_NE(error_of(script).find("a Unicode general category"), std::string::npos) << error_of(script);
  const std::string unclosed = R"({"type":"string","pattern":"^\\p{L+$"})";
  EXPECT_NE(error_of(unclosed).find("'}' closing"), std::string::npos) << error_of(unclosed);
}

}  // namespace
}  // namespace brioche::grammar
