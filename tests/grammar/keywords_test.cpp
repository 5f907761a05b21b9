// JSON Schema keywords that xgrammar ignores or approximates (so there are
// no mask goldens for them): the grammar must accept exactly the candidate
// documents that `jsonschema` judges valid
// (tests/grammar/golden/schema_keywords.json, tools/oracle/grammar_keyword_goldens.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
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
    const bool strict = !c.contains("options") || c["options"].value("strict", true);
    Grammar g = Grammar::from_json_schema(c["schema"], SchemaOptions{.any_whitespace = false, .strict = strict});
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

// Random walks never reach a dead end (a mask with nothing allowed before
// the document is complete): the counting and number-range rules keep only
// states from which an accepted document is still reachable.
TEST(SchemaKeywords, WalksAlwaysComplete) {
  auto golden = nlohmann::ordered_json::parse(
      testing::read_file(std::string(BRIOCHE_SOURCE_DIR) + "/tests/grammar/golden/schema_keywords.json"));
  auto vocab = single_bytes();
  std::vector<uint32_t> mask(vocab->num_words());
  uint64_t rng = 12345;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(rng >> 33);
  };
  for (const auto& c : golden["cases"]) {
    const bool strict = !c.contains("options") || c["options"].value("strict", true);
    auto compiled = CompiledGrammar::compile(
        Grammar::from_json_schema(c["schema"], SchemaOptions{.any_whitespace = false, .strict = strict}), vocab);
    for (int walk = 0; walk < 10; ++walk) {
      GrammarMatcher m(compiled);
      std::string text;
      for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
        m.fill_next_token_bitmask(mask.data());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id)
          if (mask[id >> 5] >> (id & 31) & 1) allowed.push_back(id);
        ASSERT_FALSE(allowed.empty()) << c["name"] << ": dead end after '" << text << "'";
        const bool can_end = mask[256 >> 5] >> (256 & 31) & 1;
        // Past 40 steps, end as soon as possible.
        int32_t pick = can_end && (step > 40 || next() % 3 == 0) ? 256 : allowed[next() % allowed.size()];
        if (step > 40 && !can_end) {
          // Prefer closing characters to finish quickly.
          for (int32_t id : allowed)
            if (id == '}' || id == '"' || id == ']') pick = id;
        }
        ASSERT_TRUE(m.accept_token(pick));
        if (pick != 256) text += static_cast<char>(pick);
      }
    }
  }
}

// The counting rules stay exact with free whitespace too.
TEST(SchemaKeywords, PropertyCountsWithWhitespace) {
  Grammar g = Grammar::from_json_schema(std::string(
      R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})"));
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

// What cannot be said exactly is refused with the keyword and its pointer:
// oneOf branches that may overlap (unless the caller opts into their
// union), an `if` that tests more than const/enum values, and conditions
// that split into too many object shapes.
TEST(SchemaKeywords, InexactConditionsAreRefusedWithTheirPointer) {
  auto error_of = [](const std::string& schema, SchemaOptions options = {}) -> std::string {
    try {
      Grammar::from_json_schema(schema, options);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string overlapping = R"({"properties":{"v":{"oneOf":[{"type":"number"},{"type":"integer"}]}}})";
  EXPECT_NE(error_of(overlapping).find("unsupported 'oneOf' at #/properties/v: branches 0 and 1 may both match"),
            std::string::npos)
      << error_of(overlapping);
  EXPECT_EQ(error_of(overlapping, {.one_of_as_any_of = true}), "");
  const std::string if_pattern =
      R"({"type":"object","properties":{"a":{"type":"string"}},"if":{"properties":{"a":{"pattern":"^x"}}},"then":{"required":["a"]}})";
  EXPECT_NE(error_of(if_pattern).find("unsupported 'if' at #: property 'a' is tested by something other than"),
            std::string::npos)
      << error_of(if_pattern);
  std::string many = R"({"type":"object","properties":{)";
  for (int i = 0; i < 10; ++i)
    many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":{\"type\":\"integer\"}";
  // Five independent dependencies: 2^5 object shapes.
  many += R"(},"dependentRequired":{"k0":["k1"],"k2":["k3"],"k4":["k5"],"k6":["k7"],"k8":["k9"]}})";
  EXPECT_NE(error_of(many).find("more than 16 object shapes"), std::string::npos) << error_of(many);
  // Beside $ref it applies (from 2019-09 on): an allOf of both (golden ref_siblings_dependent_required).
  const std::string beside_ref =
      R"({"$defs":{"o":{"type":"object"}},"$ref":"#/$defs/o","dependentRequired":{"a":["b"]}})";
  EXPECT_EQ(error_of(beside_ref), "");
  // null is admitted whole by two branches, but a third lists it in an
  // enum (its type cannot be narrowed): still refused, not guessed.
  const std::string shared_in_enum = R"({"oneOf":[{"type":["string","null"]},{"type":"null"},{"enum":[null,1]}]})";
  EXPECT_NE(error_of(shared_in_enum).find("unsupported 'oneOf' at #: branches 0 and 1 may both match"),
            std::string::npos)
      << error_of(shared_in_enum);
  // patternProperties without additionalProperties: false, in JSON Schema's
  // reading: other keys are allowed too (the pattern's complement, a DFA:
  // keys_and_formats_test.cpp).
  const std::string open_pattern_keys = R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}}})";
  EXPECT_EQ(error_of(open_pattern_keys), "");  // strict: only keys the pattern matches
  EXPECT_EQ(error_of(open_pattern_keys, {.strict = false}), "");
  // Every value matches two branches: no document is valid.
  const std::string all_shared = R"({"oneOf":[{"type":["string","null"]},{"type":["null","string"]}]})";
  EXPECT_NE(error_of(all_shared).find("no document is valid"), std::string::npos) << error_of(all_shared);
}

}  // namespace
}  // namespace brioche::grammar
