// SchemaConverter::visit_string converts equal string keywords once: a
// pattern repeated across a schema (GitLab CI: `\.ya?ml$` beside
// uri-reference 8 times, each a product of two DFAs) reuses the first
// occurrence's rule; other keywords (a maxLength) get their own.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace brioche::grammar {
namespace {

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(SchemaStringRules, EqualStringKeywordsShareOneRule) {
  const nlohmann::ordered_json yaml = {{"type", "string"}, {"format", "uri-reference"}, {"pattern", "\\.ya?ml$"}};
  nlohmann::ordered_json described = yaml;
  described["description"] = "annotations do not matter";
  const nlohmann::ordered_json bounded = {{"type", "string"}, {"pattern", "\\.ya?ml$"}, {"maxLength", 40}};
  const nlohmann::ordered_json schema = {
      {"type", "object"},
      {"properties",
       {{"a", yaml}, {"b", described}, {"c", bounded}, {"d", {{"type", "string"}, {"pattern", "\\.ya?ml$"}}}}}};
  const std::string ebnf = json_schema_to_ebnf(schema, SchemaOptions{.any_whitespace = false});
  EXPECT_EQ(occurrences(ebnf, "root_a_uri_reference ::="), 1) << ebnf;
  EXPECT_EQ(occurrences(ebnf, "root_b_uri_reference"), 0) << "b's string keywords equal a's: " << ebnf;
  EXPECT_EQ(occurrences(ebnf, "root_c_pattern ::="), 1) << ebnf;
  EXPECT_EQ(occurrences(ebnf, "root_d_pattern ::="), 1) << "d has no maxLength: a rule of its own" << ebnf;
}

}  // namespace
}  // namespace brioche::grammar
