// oneOf, allOf and conditions in the shapes of the schema corpus that the
// converter makes exact (docs/grammar.md, "Conditional keywords and oneOf"):
// the grammar accepts exactly what `jsonschema` validates
// (tests/grammar/golden/schema_combinators.json from
// tools/oracle/schema_combinator_goldens.py), the masks agree with the
// matcher token by token, and what is not exact is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

using testing_masks::single_bytes;
using testing_masks::small_alphabet;

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = testing_masks::golden_file("schema_combinators.json");
  return g;
}

// JSON Schema's reading (the corpus bench's), separators ", " and ": " as
// the goldens write them.
const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

TEST(SchemaCombinators, AcceptExactlyWhatJsonschemaValidates) {
  testing_masks::Verdicts n;
  for (const auto& vocab : {single_bytes(), small_alphabet()})
    n += testing_masks::expect_jsonschema_verdicts(golden()["cases"], kCompact, vocab);
  EXPECT_GE(n.checked, 280);
  EXPECT_GE(n.valid, 130);
}

TEST(SchemaCombinators, MasksMatchTheMatcher) {
  const int walks = testing_masks::walk_from_candidates(
      golden()["cases"], kCompact, small_alphabet(), 11,
      [](size_t, const nlohmann::ordered_json& c) { return c["valid"].get<bool>(); });
  EXPECT_GE(walks, 60);
}

std::string error_of(const std::string& schema) {
  try {
    Grammar::from_json_schema(schema, kCompact);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaCombinators, WhatIsNotExactIsRefusedByName) {
  // Open objects that require different keys, one of them an integer: an
  // object with both matches both unless a is not an integer, and "a number
  // that is not an integer" is not a schema the converter writes.
  std::string e = error_of(R"({"oneOf":[{"type":"object","required":["a"],"properties":{"a":{"type":"integer"}}},)"
                           R"({"type":"object","required":["b"]}]})");
  EXPECT_NE(e.find("unsupported 'oneOf' at #: branches 0 and 1 may both match"), std::string::npos) << e;
  // The complement of a closed object that contains itself does not end:
  // refused at the nesting limit, not a crash.
  e = error_of(
      R"({"$defs":{"X":{"type":"object","additionalProperties":false,"properties":{"a":{"$ref":"#/$defs/X"}}}},)"
      R"("oneOf":[{"type":"object","required":["k"],"properties":{"k":{"$ref":"#/$defs/X"}}},)"
      R"({"type":"object","required":["j"]}]})");
  EXPECT_NE(e.find("nest more than 128 deep"), std::string::npos) << e;
  // A nested oneOf whose own branches overlap is not spliced into the outer one.
  e = error_of(R"({"oneOf":[{"oneOf":[{"type":"integer"},{"type":"number"}]},{"type":"string"}]})");
  EXPECT_NE(e.find("unsupported 'oneOf'"), std::string::npos) << e;
  // A `not` the grammar cannot say, and several conditions on strings.
  e = error_of(R"({"type":"object","not":{"minProperties":2}})");
  EXPECT_NE(e.find("not {minProperties}"), std::string::npos) << e;
  e = error_of(R"({"type":"string","allOf":[{"not":{"pattern":"a"}},{"not":{"const":"b"}}]})");
  EXPECT_NE(e.find("unsupported 'allOf' at #: several conditions"), std::string::npos) << e;
  // An if that tests a property by a pattern.
  e = error_of(R"({"type":"object","if":{"properties":{"a":{"pattern":"^x"}}},"then":{"required":["b"]}})");
  EXPECT_NE(e.find("unsupported 'if' at #: property 'a' is tested by something other than one const or enum"),
            std::string::npos)
      << e;
  // The types beside a oneOf admit none of its branches: nothing is valid.
  e = error_of(R"({"type":"object","oneOf":[{"type":"string"},{"type":"integer"}]})");
  EXPECT_NE(e.find("no branch admits a value of the types beside it"), std::string::npos) << e;
  // Two branches of allOf with different patternProperties.
  e = error_of(R"({"allOf":[{"patternProperties":{"^a":{"type":"string"}}},{"patternProperties":{"^b":{}}}]})");
  EXPECT_NE(e.find("patternProperties in two branches"), std::string::npos) << e;
}

}  // namespace
}  // namespace brioche::grammar
