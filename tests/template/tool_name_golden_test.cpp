// Tool names with JSON-special characters (quotes, backslashes, control
// characters, non-ASCII, markup) render exactly as transformers renders them
// (tools/oracle/template_tool_name_goldens.py): `tojson` escapes them, so the
// model sees the declared name as valid JSON; a template that prints a name
// raw (Qwen3's history of calls) prints it raw in both.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "template/chat_template.h"

namespace brioche::tmpl {
namespace {

using json = nlohmann::ordered_json;

const json& golden() {
  static const json g = [] {
    std::ifstream in(std::string(BRIOCHE_SOURCE_DIR) + "/tests/template/golden/tool_names.json");
    EXPECT_TRUE(in.good()) << "missing golden file tests/template/golden/tool_names.json";
    std::stringstream buffer;
    buffer << in.rdbuf();
    return json::parse(buffer.str());
  }();
  return g;
}

TEST(ToolNameGolden, QwenTemplateMatchesTransformers) {
  ChatTemplate tmpl = ChatTemplate::parse(golden()["template"].get<std::string>(), "qwen3");
  int checked = 0;
  for (const auto& c : golden()["cases"]) {
    ChatRequest request;
    request.messages = c["messages"];
    request.tools = c["tools"];
    request.add_generation_prompt = true;
    std::string got;
    EXPECT_NO_THROW(got = render_chat(tmpl, request)) << c["name"];
    EXPECT_EQ(got, c["expected"].get<std::string>()) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 14);
}

TEST(ToolNameGolden, FiltersMatchJinja) {
  int checked = 0;
  for (const auto& c : golden()["filters"]) {
    std::string got;
    EXPECT_NO_THROW(got = ChatTemplate::parse(c["template"].get<std::string>(), "t").render(c["context"])) << c["name"];
    EXPECT_EQ(got, c["expected"].get<std::string>()) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 42);
}

// The declared tool list, as the model reads it, parses back to the same names.
TEST(ToolNameGolden, DeclaredQuotedNameIsValidJsonInThePrompt) {
  ChatTemplate tmpl = ChatTemplate::parse(golden()["template"].get<std::string>(), "qwen3");
  ChatRequest request;
  request.messages = json::array({json{{"role", "user"}, {"content", "hi"}}});
  request.tools = json::parse(R"([{"type":"function","function":{"name":"a\"b","parameters":{"type":"object"}}}])");
  request.add_generation_prompt = true;
  std::string prompt = render_chat(tmpl, request);
  size_t open = prompt.find("<tools>\n"), close = prompt.find("\n</tools>");
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  json declared = json::parse(prompt.substr(open + 8, close - open - 8));
  EXPECT_EQ(declared["function"]["name"], "a\"b");
}

}  // namespace
}  // namespace brioche::tmpl
