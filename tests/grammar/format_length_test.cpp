// A `format` whose strings vary in length beside minLength/maxLength
// (date-time, time, ipv4, ipv6, email, hostname, uri, json-pointer): one
// count of characters over the format's language, `(F)%{m,n}`
// (schema_strings.cpp's format_with_length); and the ipv6 and json-pointer
// formats themselves. The language is checked against `jsonschema`'s
// verdicts on values a few characters around each bound
// (tests/grammar/golden/format_length.json from
// tools/oracle/format_length_goldens.py); the masks near the bounds are
// checked without trusting them, token by token against the matcher.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_vocab.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::mask_mismatches;
using testing_masks::single_bytes;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("format_length.json");
  return g;
}

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

// Tokens of up to 4 characters that write the candidates' formats (digits,
// the separators of dates, addresses and URIs, a few letters, the quote).
std::shared_ptr<const Vocabulary> format_alphabet() {
  static auto v = testing_masks::alphabet_vocabulary("019:.-@/aTZ~\"");
  return v;
}

std::string error_of(const nlohmann::ordered_json& schema) {
  try {
    (void)Grammar::from_json_schema(schema, kCompact);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FormatLength, AcceptsExactlyWhatJsonschemaValidates) {
  testing_masks::Verdicts n;
  for (const auto& vocab : {single_bytes(), format_alphabet()})
    n += testing_masks::expect_jsonschema_verdicts(
        golden()["cases"], kCompact, vocab, [](const std::string& name, const Grammar& g, const CompiledGrammar&) {
          EXPECT_NE(g.to_ebnf().find(")%{"), std::string::npos) << name << ": expected one count over the format";
        });
  EXPECT_GE(n.checked, 300);
  EXPECT_GE(n.valid, 140);
}

TEST(FormatLength, MasksMatchTheMatcher) {
  const int walks = testing_masks::walk_from_candidates(golden()["cases"], kCompact, format_alphabet(), 5,
                                                        [](size_t i, const auto&) { return i % 3 == 0; });
  EXPECT_GE(walks, 50);
}

// On Llama-3's 128k tokens (window 128: the 8192 bound is counted), every
// token's bit a few characters before the bound of a URI and at it.
TEST(FormatLength, Llama3MasksAreExactAroundTheBound) {
  auto vocab = testing::fixture_vocabulary("llama3");
  const nlohmann::ordered_json schema = {{"type", "string"}, {"format", "uri"}, {"maxLength", 8192}};
  auto compiled = CompiledGrammar::compile(Grammar::from_json_schema(schema, kCompact), vocab);
  EXPECT_FALSE(compiled->automaton().counters.empty());
  const std::string head = "\"https://ex.io/";
  for (int64_t total : {8000, 8189, 8192}) {
    const std::string prefix = head + std::string(size_t(total) - (head.size() - 1), 'a');
    EXPECT_EQ(mask_mismatches(compiled, prefix, 1, 1, "llama3 uri " + std::to_string(total)), 0);
  }
  const nlohmann::ordered_json date_time = {{"type", "string"}, {"format", "date-time"}, {"maxLength", 24}};
  auto dt = CompiledGrammar::compile(Grammar::from_json_schema(date_time, kCompact), vocab);
  for (const char* prefix : {"\"2024-02-29T23:59:58", "\"2024-02-29T23:59:58.12", "\"2024-02-29T23:59:58.123"})
    EXPECT_EQ(mask_mismatches(dt, prefix, 1, 1, std::string("llama3 date-time ") + prefix), 0);
}

// Formats whose length the grammar does not count are refused by name.
TEST(FormatLength, UncountedFormatsAreRefusedByName) {
  const std::string e = error_of({{"type", "string"}, {"format", "duration"}, {"maxLength", 20}});
  EXPECT_NE(e.find("unsupported 'maxLength' at #: beside format 'duration'"), std::string::npos) << e;
  const std::string order = error_of({{"type", "string"}, {"format", "uri"}, {"minLength", 9}, {"maxLength", 3}});
  EXPECT_NE(order.find("expected 0 <= minLength <= maxLength"), std::string::npos) << order;
  // Bounds that admit none of the format's strings (an IPv4 address has
  // 7..15 characters).
  const std::string none = error_of({{"type", "string"}, {"format", "ipv4"}, {"maxLength", 6}});
  EXPECT_NE(none.find("no string of format 'ipv4' has 0..6 characters (its strings have 7..15)"), std::string::npos)
      << none;
  EXPECT_NE(error_of({{"type", "string"}, {"format", "ipv4"}, {"minLength", 16}}).find("has 16.. characters"),
            std::string::npos);
  EXPECT_EQ(error_of({{"type", "string"}, {"format", "date-time"}, {"minLength", 100}}), "");  // fractions grow
  // Fixed-length formats keep their own reading: a bound the length misses.
  EXPECT_NE(error_of({{"type", "string"}, {"format", "uuid"}, {"maxLength", 20}}).find("36 characters; none fits"),
            std::string::npos);
}

}  // namespace
}  // namespace brioche::grammar
