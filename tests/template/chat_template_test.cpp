// Chat templates against transformers' apply_chat_template goldens
// (tools/oracle/template_goldens.py), plus error locations and hostile templates.
#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace brioche::tmpl {
namespace {

using json = nlohmann::ordered_json;

const json& golden() {
  static const json g = [] {
    std::ifstream in(std::string(BRIOCHE_SOURCE_DIR) + "/tests/template/golden/chat_templates.json");
    EXPECT_TRUE(in.good()) << "missing golden file";
    std::stringstream buffer;
    buffer << in.rdbuf();
    return json::parse(buffer.str());
  }();
  return g;
}

std::string render_string(const std::string& source, const json& context = json::object(), RenderLimits limits = {}) {
  return ChatTemplate::parse(source, "t", limits).render(context);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

ChatRequest request_for(const json& family, const json& c) {
  ChatRequest req;
  req.messages = c["messages"];
  req.tools = c["tools"];
  req.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  for (const auto& [k, v] : family["special_tokens"].items()) {
    if (k == "bos_token")
      req.bos_token = v.get<std::string>();
    else if (k == "eos_token")
      req.eos_token = v.get<std::string>();
    else
      req.extra[k] = v;
  }
  for (const auto& [k, v] : c["kwargs"].items()) req.extra[k] = v;
  return req;
}

// The oracle's message for raise_exception is "TemplateError: <text>".
void expect_error_matches(const std::string& ours, const std::string& oracle, const std::string& label) {
  EXPECT_NE(ours, "<no error>") << label << ": oracle failed with " << oracle << " but we rendered";
  const std::string prefix = "TemplateError: ";
  if (oracle.rfind(prefix, 0) == 0) {
    EXPECT_NE(ours.find("raise_exception: " + oracle.substr(prefix.size())), std::string::npos)
        << label << ": " << ours;
  }
}

TEST(ChatTemplateGolden, FamiliesMatchTransformers) {
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, family] : golden()["families"].items())
    templates.emplace(name, ChatTemplate::parse(family["template"].get<std::string>(), name));
  std::map<std::string, int> rendered, errors;
  for (const auto& c : golden()["cases"]) {
    std::string family = c["family"].get<std::string>();
    std::string label = family + "/" + c["name"].get<std::string>();
    ChatRequest req = request_for(golden()["families"][family], c);
    if (c.contains("expected")) {
      std::string got;
      EXPECT_NO_THROW(got = render_chat(templates.at(family), req)) << label;
      EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
      ++rendered[family];
    } else {
      std::string ours = error_of([&] { render_chat(templates.at(family), req); });
      expect_error_matches(ours, c["error"].get<std::string>(), label);
      ++errors[family];
    }
  }
  for (const char* family : {"smollm2", "llama2", "llama3", "qwen3", "gemma3"})
    EXPECT_GE(rendered[family], 8) << family << " needs at least 8 rendered conversations";
}

TEST(ChatTemplateGolden, FeatureTemplatesMatchJinja) {
  int checked = 0;
  for (const auto& c : golden()["features"]) {
    std::string label = c["name"].get<std::string>();
    std::string source = c["template"].get<std::string>();
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render_string(source, c["context"]);
      } catch (const Error& e) {
        ADD_FAILURE() << label << ": " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
    } else {
      std::string ours = error_of([&] { render_string(source, c["context"]); });
      expect_error_matches(ours, c["error"].get<std::string>(), label);
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

TEST(ChatTemplateGolden, RecordsOracleVersion) {
  EXPECT_NE(golden()["oracle"].get<std::string>().find("transformers"), std::string::npos);
}

// ---- errors name the line and what failed ----

TEST(ChatTemplateErrors, SyntaxErrorNamesLine) {
  std::string e = error_of([] { ChatTemplate::parse("a\nb\n{{ 1 + }}", "mytpl"); });
  EXPECT_EQ(e.rfind("mytpl:3:", 0), 0u) << e;
  EXPECT_NE(e.find("'}}'"), std::string::npos) << e;
}

TEST(ChatTemplateErrors, UnclosedBlockNamesOpeningLine) {
  std::string e = error_of([] { ChatTemplate::parse("x\n{% if true %}\nopen", "tpl"); });
  EXPECT_NE(e.find("expected 'elif' or 'else' or 'endif'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(ChatTemplateErrors, UnknownFilterAtParseTime) {
  std::string e = error_of([] { ChatTemplate::parse("ok\n  {{ 'x' | no_such_filter }}", "tpl"); });
  EXPECT_EQ(e.rfind("tpl:2:", 0), 0u) << e;
  EXPECT_NE(e.find("no filter named 'no_such_filter'"), std::string::npos) << e;
}

TEST(ChatTemplateErrors, UnknownTestAndTag) {
  EXPECT_NE(error_of([] { ChatTemplate::parse("{{ x is bogus }}", "t"); }).find("no test named 'bogus'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ChatTemplate::parse("\n{% frobnicate %}", "t");
            }).find("t:2:4: encountered unknown tag 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::parse("{% include 'x' %}", "t"); }).find("not supported"), std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::parse("{% break %}", "t"); }).find("outside a for loop"), std::string::npos);
}

TEST(ChatTemplateErrors, RaiseExceptionMessageAndLine) {
  std::string e = error_of(
      [] { render_string("line1\n{% if true %}\n  {{ raise_exception('Roles must alternate') }}\n{% endif %}"); });
  EXPECT_EQ(e.rfind("t:3:", 0), 0u) << e;
  EXPECT_NE(e.find("raise_exception: Roles must alternate"), std::string::npos) << e;
}

TEST(ChatTemplateErrors, RuntimeErrorsNameWhatFailed) {
  EXPECT_NE(error_of([] { render_string("{{ u.attr }}"); }).find("'u' is undefined"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 'a' + 1 }}"); }).find("can only concatenate str"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("\n\n{{ 1 < 'a' }}"); }).find("t:3:"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 1 // 0 }}"); }).find("by zero"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{% set x = 1 %}{% set x.y = 2 %}"); }).find("namespace"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 'abc'() }}"); }).find("not callable"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 'unterminated }}"); }).find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ x "); }).find("expected '}}'"), std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 99999999999999999999 }}"); }).find("64 bits"), std::string::npos);
}

// ---- hostile templates give errors, not crashes or hangs ----

TEST(ChatTemplateLimits, UnboundedMacroRecursion) {
  std::string e = error_of([] { render_string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_NE(e.find("macro call depth limit"), std::string::npos) << e;
}

TEST(ChatTemplateLimits, HugeRangeAndNestedLoops) {
  EXPECT_NE(error_of([] { render_string("{% for i in range(1000000000) %}{% endfor %}"); }).find("iteration limit"),
            std::string::npos);
  std::string e = error_of([] {
    render_string(
        "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% "
        "endfor %}");
  });
  EXPECT_NE(e.find("iteration limit"), std::string::npos) << e;
}

TEST(ChatTemplateLimits, OutputAndStringBombs) {
  RenderLimits small;
  small.max_output_bytes = 1 << 20;
  EXPECT_NE(error_of([&] {
              render_string("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", json::object(),
                            small);
            }).find("output limit"),
            std::string::npos);
  EXPECT_NE(error_of([] { render_string("{{ 'a' * 1000000000000 }}"); }).find("output limit"), std::string::npos);
  EXPECT_NE(error_of([&] {
              render_string(
                  "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                  json::object(), small);
            }).find("limit"),
            std::string::npos);
}

TEST(ChatTemplateLimits, DeepNestingIsRefusedAtParse) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(error_of([&] { ChatTemplate::parse(parens, "t"); }).find("the limit is 200"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 5000; ++i) ifs += "{% endif %}";
  EXPECT_NE(error_of([&] { ChatTemplate::parse(ifs, "t"); }).find("the limit is 200"), std::string::npos);
  std::string nots = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 100000; ++i) nots += "not ";
  nots += "x }}";
  EXPECT_NE(error_of([&] { ChatTemplate::parse(nots, "t"); }).find("the limit is 200"), std::string::npos);
}

TEST(ChatTemplateLimits, DeepJsonValueInTojson) {
  json deep = 1;
  for (int i = 0; i < 2000; ++i) deep = json::array({deep});
  std::string e = error_of([&] { render_string("{{ v | tojson }}", json{{"v", deep}}); });
  EXPECT_NE(e.find("nests 2001 levels of arrays/objects; the limit is 256"), std::string::npos) << e;
}

// ---- API pieces ----

TEST(ChatTemplateApi, RenderChatBuildsTransformersContext) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}{{ m | tojson }}|{% endfor %}{{ tools is none }}|{{ add_generation_prompt }}|{{ "
      "bos_token }}|{{ flag }}",
      "ctx");
  ChatRequest req;
  req.messages = json::array({json{{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r"}}});
  req.add_generation_prompt = true;
  req.bos_token = "<s>";
  req.extra = json{{"flag", 7}};
  EXPECT_EQ(render_chat(t, req),
            "{\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", \"reasoning_content\": "
            "\"r\"}|True|True|<s>|7");
}

TEST(ChatTemplateApi, PlainFormatFallback) {
  ChatRequest req;
  req.messages = json::array(
      {json{{"role", "system"}, {"content", "Be brief."}},
       json{{"role", "user"}, {"content", json::array({json{{"type", "text"}, {"text", "Hi"}}})}},
       json{{"role", "assistant"},
            {"content", ""},
            {"tool_calls", json::array({json{{"function", json{{"name", "f"}, {"arguments", json::object()}}}}})}}});
  req.add_generation_prompt = true;
  EXPECT_EQ(plain_chat_format(req),
            "System: Be brief.\n\nUser: Hi\n\nAssistant: "
            "\n<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n\nAssistant:");
}

TEST(ChatTemplateApi, SelectsTemplateFromConfigField) {
  nlohmann::json list =
      nlohmann::json::array({{{"name", "default"}, {"template", "D"}}, {{"name", "tool_use"}, {"template", "T"}}});
  EXPECT_EQ(select_chat_template(list, false).value(), "D");
  EXPECT_EQ(select_chat_template(list, true).value(), "T");
  EXPECT_EQ(select_chat_template(nlohmann::json("S"), true).value(), "S");
  EXPECT_FALSE(select_chat_template(nlohmann::json(), false).has_value());
}

TEST(ChatTemplateApi, ReusableAcrossRendersAndThreadsOfState) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", "sum");
  EXPECT_EQ(t.render(json{{"xs", {1, 2, 3}}}), "6");
  EXPECT_EQ(t.render(json{{"xs", {10}}}), "10");  // no state leaks between renders
}

}  // namespace
}  // namespace brioche::tmpl
