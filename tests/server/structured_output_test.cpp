// Structured-output request fields: precedence, tool-call schemas, type
// errors, degrade prompt. (Compilation and decoding: engine_grammar_test and
// structured_e2e_test.py.)
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "server/structured_output.h"

namespace brioche::server {
namespace {

using nlohmann::json;
using Kind = StructuredOutputSpec::Kind;

StructuredOutputSpec parse(const std::string& body, bool hermes = true, const std::string& open = "") {
  ApiRequest req = parse_api_request(Endpoint::ChatCompletions, body);
  return parse_structured_output(body, req, hermes, open);
}

const char* kMessages = R"("messages":[{"role":"user","content":"hi"}])";

std::string body(const std::string& fields) { return std::string("{") + kMessages + "," + fields + "}"; }

TEST(StructuredOutput, NothingRequested) {
  EXPECT_EQ(parse(std::string("{") + kMessages + "}").kind, Kind::None);
  EXPECT_EQ(parse(body(R"("response_format":{"type":"text"})")).kind, Kind::None);
}

TEST(StructuredOutput, JsonSchemaFieldsAndPropertyOrder) {
  StructuredOutputSpec s =
      parse(body(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
      "any_whitespace":false,"schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}})"));
  EXPECT_EQ(s.kind, Kind::JsonSchema);
  EXPECT_EQ(s.name, "p");
  EXPECT_TRUE(s.strict);
  EXPECT_FALSE(s.any_whitespace);
  EXPECT_EQ(s.field, "response_format.json_schema.schema");
  // Declaration order survives (the grammar emits properties in this order).
  EXPECT_EQ(s.schema["properties"].begin().key(), "z");
}

TEST(StructuredOutput, PrecedenceFollowsTheReferenceDesign) {
  const std::string grammar = R"("guided_grammar":"root ::= \"a\"")";
  const std::string schema =
      R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}})";
  const std::string object = R"("response_format":{"type":"json_object"})";
  const std::string so = R"("structured_outputs":{"type":"boolean"})";
  const std::string regex = R"("guided_regex":"[0-9]+")";
  const std::string choice = R"("guided_choice":["x","y"])";
  EXPECT_EQ(parse(body(choice + "," + regex + "," + so + "," + schema + "," + grammar)).kind, Kind::Grammar);
  EXPECT_EQ(parse(body(choice + "," + regex + "," + so + "," + schema)).kind, Kind::JsonSchema);
  EXPECT_EQ(parse(body(choice + "," + regex + "," + so + "," + object)).kind, Kind::JsonObject);
  StructuredOutputSpec s = parse(body(choice + "," + regex + "," + so));
  EXPECT_EQ(s.kind, Kind::JsonSchema);
  EXPECT_EQ(s.field, "structured_outputs");
  EXPECT_EQ(parse(body(choice + "," + regex)).kind, Kind::Regex);
  StructuredOutputSpec c = parse(body(choice));
  EXPECT_EQ(c.kind, Kind::Choice);
  EXPECT_EQ(c.choices, (std::vector<std::string>{"x", "y"}));
}

TEST(StructuredOutput, VllmStructuredOutputsObject) {
  EXPECT_EQ(parse(body(R"("structured_outputs":{"regex":"a+"})")).kind, Kind::Regex);
  EXPECT_EQ(parse(body(R"("structured_outputs":{"choice":["a"]})")).kind, Kind::Choice);
  EXPECT_EQ(parse(body(R"("structured_outputs":{"json":"{\"type\":\"string\"}"})")).kind, Kind::JsonSchema);
}

TEST(StructuredOutput, WrongTypesAreNamed) {
  auto param_of = [](const std::string& b) -> std::string {
    try {
      parse(b);
    } catch (const ApiError& e) {
      return e.param;
    }
    return "(no error)";
  };
  EXPECT_EQ(param_of(body(R"("guided_choice":"x")")), "guided_choice");
  EXPECT_EQ(param_of(body(R"("guided_regex":5)")), "guided_regex");
  EXPECT_EQ(param_of(body(R"("response_format":{"type":"yaml"})")), "response_format.type");
  EXPECT_EQ(param_of(body(R"("response_format":{"type":"json_schema"})")), "response_format.json_schema");
  EXPECT_EQ(param_of(body(R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}})")),
            "response_format.json_schema.strict");
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(StructuredOutput, DeepSchemaStringsAreA400NamingTheDepth) {
  // A schema inside a JSON string is parsed with the same nesting bound as
  // the body (the body's own bound does not see inside the string).
  const std::string deep = repeat("{\\\"items\\\":", 3000) + "{}" + repeat("}", 3000);
  for (const std::string& field : {std::string(R"("structured_outputs":{"json":")") + deep + "\"}",
                                   std::string(R"("guided_json":")") + deep + "\""}) {
    try {
      parse(body(field));
      ADD_FAILURE() << "no error for " << field.substr(0, 40);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(e.message.find("3001 levels deep; the limit is 128"), std::string::npos) << e.message;
    }
  }
}

TEST(StructuredOutput, DeepRegexAndGrammarFailToConvertWithTheLimit) {
  // prepare() turns these errors into a 400 (strict) or the degrade path.
  StructuredOutputSpec regex = parse(body(R"("guided_regex":")" + repeat("(", 5000) + "a" + repeat(")", 5000) + "\""));
  ASSERT_EQ(regex.kind, Kind::Regex);
  try {
    structured_output_grammar(regex);
    ADD_FAILURE() << "deep regex converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nests groups 5000 deep; the limit is 256"), std::string::npos) << e.what();
  }
  StructuredOutputSpec ebnf =
      parse(body(R"("guided_grammar":"root ::= )" + repeat("(", 5000) + "\\\"a\\\"" + repeat(")", 5000) + "\""));
  ASSERT_EQ(ebnf.kind, Kind::Grammar);
  try {
    structured_output_grammar(ebnf);
    ADD_FAILURE() << "deep grammar converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the limit is 1024"), std::string::npos) << e.what();
  }
}

TEST(StructuredOutput, JsonObjectIsAnObjectAtTheTop) {
  StructuredOutputSpec s = parse(body(R"("response_format":{"type":"json_object"})"));
  ASSERT_EQ(s.kind, Kind::JsonObject);
  const grammar::Grammar g = structured_output_grammar(s);
  // The root rule is the object rule alone (xgrammar's builtin allows arrays too).
  EXPECT_NE(g.to_ebnf().find("root ::= object\n"), std::string::npos) << g.to_ebnf();
}

// strict: OpenAI's reading (only the listed keys); otherwise JSON Schema's
// (unlisted keys allowed unless additionalProperties is false).
TEST(StructuredOutput, StrictClosesObjectsAndNonStrictReadsJsonSchema) {
  auto vocab = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    toks.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(toks.size() - 1);
    return std::make_shared<const grammar::Vocabulary>(std::move(toks), grammar::VocabularyOptions{.eos_ids = {eos}});
  }();
  auto accepts = [&](const StructuredOutputSpec& spec, const std::string& text) {
    grammar::GrammarMatcher m(grammar::CompiledGrammar::compile(structured_output_grammar(spec), vocab));
    return m.accept_bytes(text) && m.can_terminate();
  };
  const std::string schema = R"("schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  for (const char* strict : {"true", "false", "null"}) {
    StructuredOutputSpec s =
        parse(body(std::string(R"("response_format":{"type":"json_schema","json_schema":{"name":"p",)") +
                   (std::string(strict) == "null" ? "" : std::string("\"strict\":") + strict + ",") + schema + "}}"));
    const bool is_strict = std::string(strict) == "true";
    EXPECT_EQ(s.strict, is_strict) << strict;
    EXPECT_TRUE(accepts(s, R"({"a": 1})")) << strict;
    EXPECT_EQ(accepts(s, R"({"a": 1, "b": [true]})"), !is_strict) << strict;
    EXPECT_FALSE(accepts(s, R"({"b": 1})")) << strict;  // required holds either way
  }
  StructuredOutputSpec closed = parse(body(R"("response_format":{"type":"json_schema","json_schema":{"name":"p",)"
                                           R"("schema":{"type":"object","properties":{"a":{"type":"integer"}},)"
                                           R"("additionalProperties":false}}})"));
  EXPECT_FALSE(accepts(closed, R"({"a": 1, "b": 2})"));
}

const char* kTools = R"("tools":[
  {"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"n":{"$ref":"#/$defs/num"}},
    "required":["n"],"$defs":{"num":{"type":"integer"}}}}},
  {"type":"function","function":{"name":"b","strict":true,"parameters":{"type":"object","properties":{"s":{"type":"string"}}}}}])";

TEST(StructuredOutput, RequiredToolCallCoversEveryToolWithHoistedDefs) {
  StructuredOutputSpec s = parse(body(std::string(kTools) + R"(,"tool_choice":"required")"), true, "<tool_call>\n");
  ASSERT_EQ(s.kind, Kind::ToolCall);
  EXPECT_TRUE(s.strict);  // one of the tools is strict
  EXPECT_EQ(s.suffix, "\n</tool_call>");
  ASSERT_TRUE(s.schema.contains("anyOf"));
  EXPECT_EQ(s.schema["anyOf"].size(), 2u);
  EXPECT_EQ(s.schema["anyOf"][0]["properties"]["arguments"]["properties"]["n"]["$ref"], "#/$defs/a__num");
  EXPECT_TRUE(s.schema["$defs"].contains("a__num"));
  // The call schema compiles (refs resolve after hoisting).
  EXPECT_NO_THROW(grammar::Grammar::from_json_schema(s.schema));
}

TEST(StructuredOutput, NamedToolCallIsItsArgumentsThenTheClose) {
  StructuredOutputSpec s =
      parse(body(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"b"}})"), true,
            "<tool_call>\n");
  ASSERT_EQ(s.kind, Kind::ToolCall);
  EXPECT_EQ(s.name, "b");
  EXPECT_EQ(s.suffix, "}\n</tool_call>");
  EXPECT_EQ(s.schema["properties"].begin().key(), "s");
}

TEST(StructuredOutput, StrictToolsUnderAutoWaitForTheCallTag) {
  StructuredOutputSpec s = parse(body(kTools));
  ASSERT_EQ(s.kind, Kind::ToolCall);
  EXPECT_EQ(s.trigger, "<tool_call>");
  ASSERT_FALSE(s.schema.contains("anyOf"));  // only the strict tool 'b'
  EXPECT_EQ(s.schema["properties"]["name"]["const"], "b");
  // Explicit response fields win over an auto tool constraint.
  EXPECT_EQ(parse(body(std::string(kTools) + R"(,"guided_choice":["x"])")).kind, Kind::Choice);
}

TEST(StructuredOutput, ResponsesTextFormat) {
  std::string b =
      R"({"input":"hi","text":{"format":{"type":"json_schema","name":"r","strict":true,"schema":{"type":"integer"}}}})";
  ApiRequest req = parse_api_request(Endpoint::Responses, b);
  StructuredOutputSpec s = parse_structured_output(b, req, true, "");
  EXPECT_EQ(s.kind, Kind::JsonSchema);
  EXPECT_EQ(s.name, "r");
  EXPECT_TRUE(s.strict);
  EXPECT_EQ(s.schema["type"], "integer");
}

TEST(StructuredOutput, InjectSystemPrompt) {
  json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  inject_system_prompt(messages, "Use JSON.");
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0]["role"], "system");
  inject_system_prompt(messages, "Really.");
  EXPECT_EQ(messages[0]["content"], "Use JSON.\n\nReally.");
}

}  // namespace
}  // namespace brioche::server
