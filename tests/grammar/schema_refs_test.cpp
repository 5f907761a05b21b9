// `$ref` beyond JSON pointers from the root (schema_refs.cpp): `$anchor`,
// plain-name `$id`s, and URIs naming the root or a subschema by `$id`,
// against `jsonschema`'s verdicts (tests/grammar/golden/schema_refs.json
// from tools/oracle/schema_ref_goldens.py); and the refusals of what
// names nothing in the schema or names two subschemas.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "mask_check.h"

namespace brioche::grammar {
namespace {

const SchemaOptions kCompact{.any_whitespace = false, .strict = false};

std::string error_of(const nlohmann::ordered_json& schema) {
  try {
    (void)Grammar::from_json_schema(schema, kCompact);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaRefs, AcceptsExactlyWhatJsonschemaValidates) {
  const auto golden = testing_masks::golden_file("schema_refs.json");
  const testing_masks::Verdicts n =
      testing_masks::expect_jsonschema_verdicts(golden["cases"], kCompact, testing_masks::single_bytes());
  EXPECT_GE(n.checked, 35);
  EXPECT_GE(n.valid, 16);
}

TEST(SchemaRefs, WhatNamesNothingOrTwoThingsIsRefused) {
  std::string e = error_of({{"type", "array"}, {"items", {{"$ref", "#nowhere"}}}});
  EXPECT_NE(e.find("unsupported '$ref' at #/items: reference '#nowhere' names no $anchor or $id"), std::string::npos)
      << e;
  e = error_of({{"$ref", "https://elsewhere.io/s.json#/a"}});
  EXPECT_NE(e.find("names no $id in the schema"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing is fetched"), std::string::npos) << e;
  e = error_of(
      {{"$defs", {{"a", {{"$anchor", "x"}, {"type", "string"}}}, {"b", {{"$anchor", "x"}, {"type", "integer"}}}}},
       {"$ref", "#x"}});
  EXPECT_NE(e.find("'#x' names two subschemas"), std::string::npos) << e;
  // A pointer inside a subschema with an $id of its own means that
  // resource's definitions (jsonschema reads the integer): refused, not
  // read from the root (the string).
  e = error_of({{"$id", "https://x.io/root.json"},
                {"$defs",
                 {{"a",
                   {{"$id", "a.json"},
                    {"$defs", {{"b", {{"type", "integer"}}}}},
                    {"type", "array"},
                    {"items", {{"$ref", "#/$defs/b"}}}}},
                  {"b", {{"type", "string"}}}}},
                {"$ref", "#/$defs/a"}});
  EXPECT_NE(e.find("unsupported '$ref' at #/$defs/a/items: '#/$defs/b' inside the subschema with $id 'a.json'"),
            std::string::npos)
      << e;
  // A property called "id" (draft 4's keyword, a common name) names nothing.
  e = error_of({{"properties", {{"id", {{"type", "string"}}}}}, {"items", {{"$ref", "#/properties/id"}}}});
  EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace brioche::grammar
