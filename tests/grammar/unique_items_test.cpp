// uniqueItems: true beyond the goldens (tests/grammar/golden/schema_keywords.json
// has the exact set grammars, tests/grammar/golden/unique_items.json the
// run-time checks, both judged by jsonschema): what cannot be kept
// duplicate-free is refused with its pointer, or dropped on request
// (SchemaOptions::unique_items_approximate, the server's non-strict requests).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar {
namespace {

std::string refusal(const nlohmann::ordered_json& schema) {
  try {
    Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = false});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool accepts(const nlohmann::ordered_json& schema, const SchemaOptions& options, const std::string& text) {
  static auto vocab = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    toks.push_back("");
    return std::make_shared<const Vocabulary>(std::move(toks), VocabularyOptions{.eos_ids = {256}, .special_ids = {}});
  }();
  GrammarMatcher m(CompiledGrammar::compile(Grammar::from_json_schema(schema, options), vocab));
  return m.accept_bytes(text) && m.can_terminate();
}

TEST(UniqueItems, UnenforceableIsRefusedWithItsPointer) {
  // Strings, objects, large enums: checked at run time (unique_items_runtime_test.cpp).
  const nlohmann::ordered_json strings = {
      {"type", "object"},
      {"properties", {{"tags", {{"type", "array"}, {"items", {{"type", "string"}}}, {"uniqueItems", true}}}}}};
  EXPECT_EQ(refusal(strings), "");
  nlohmann::ordered_json nine = {
      {"type", "array"}, {"items", {{"enum", nlohmann::ordered_json::array()}}}, {"uniqueItems", true}};
  for (int i = 0; i < 9; ++i) nine["items"]["enum"].push_back(i);
  EXPECT_EQ(refusal(nine), "");
  // No type: any value, arrays of anything included.
  EXPECT_NE(refusal({{"uniqueItems", true}}).find("'uniqueItems' at #"), std::string::npos);
  // A tuple's items live in several rules: not compared.
  const std::string tuple = refusal(
      {{"type", "array"}, {"prefixItems", {{{"type", "string"}}, {{"type", "string"}}}}, {"uniqueItems", true}});
  EXPECT_NE(tuple.find("unsupported 'uniqueItems' at #: expected items without prefixItems"), std::string::npos)
      << tuple;
  // Beside $ref it applies (an allOf of both; golden ref_siblings_unique_items in schema_keywords.json).
  EXPECT_EQ(refusal({{"$defs", {{"a", {{"type", "array"}}}}}, {"$ref", "#/$defs/a"}, {"uniqueItems", true}}), "");
  // Types without arrays: nothing to constrain.
  EXPECT_EQ(refusal({{"type", "string"}, {"uniqueItems", true}}), "");
  EXPECT_EQ(refusal({{"type", "array"}, {"uniqueItems", false}}), "");
}

// With maxItems 0 or 1 no two items can be equal: exact with no set at all,
// in strict requests too (verdicts: jsonschema 4.26, Draft 2020-12).
TEST(UniqueItems, AtMostOneItemIsAlwaysUnique) {
  const nlohmann::ordered_json one = {
      {"type", "array"}, {"items", {{"type", "string"}}}, {"uniqueItems", true}, {"maxItems", 1}};
  const SchemaOptions exact{.any_whitespace = false, .unique_items_approximate = false};
  EXPECT_TRUE(accepts(one, exact, "[]"));
  EXPECT_TRUE(accepts(one, exact, R"(["a"])"));
  EXPECT_FALSE(accepts(one, exact, R"(["a", "a"])"));
  EXPECT_FALSE(accepts(one, exact, R"(["a", "b"])"));
  EXPECT_FALSE(accepts(one, exact, "[1]"));
}

TEST(UniqueItems, ApproximateDropsItWhereNotEnforceable) {
  const nlohmann::ordered_json any = {{"uniqueItems", true}};
  const SchemaOptions approximate{.any_whitespace = false, .unique_items_approximate = true};
  EXPECT_TRUE(accepts(any, approximate, "[1, 1]"));  // duplicates admitted: documented
  // Where it is enforceable, the option changes nothing.
  const nlohmann::ordered_json strings = {{"type", "array"}, {"items", {{"type", "string"}}}, {"uniqueItems", true}};
  EXPECT_FALSE(accepts(strings, approximate, R"(["a", "a"])"));
  EXPECT_TRUE(accepts(strings, approximate, R"(["a", "b"])"));
  const nlohmann::ordered_json flags = {{"type", "array"}, {"items", {{"type", "boolean"}}}, {"uniqueItems", true}};
  EXPECT_TRUE(accepts(flags, approximate, "[true, false]"));
  EXPECT_FALSE(accepts(flags, approximate, "[true, true]"));
}

}  // namespace
}  // namespace brioche::grammar
