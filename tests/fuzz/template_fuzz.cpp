// libFuzzer target: chat templates. The first input byte picks the mode:
//   even: the rest is a template, rendered with a fixed conversation (system,
//         user, assistant with a tool call, tool result) and one tool;
//   odd:  the rest is a request-shaped JSON (a messages array, or an object
//         with messages/tools), rendered with every family template from
//         tests/template/golden/chat_templates.json.
// Any input must render or throw brioche::Error; limits are smaller than the
// defaults so one input stays well inside libFuzzer's timeout.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"
#include "template/chat_template.h"

namespace {

using json = nlohmann::ordered_json;
using brioche::tmpl::ChatTemplate;
using brioche::tmpl::RenderLimits;

RenderLimits fuzz_limits() {
  RenderLimits limits;
  limits.max_output_bytes = size_t{1} << 20;
  limits.max_loop_iterations = 20'000;
  limits.max_work_bytes = int64_t{32} << 20;
  return limits;
}

const json& fixed_request() {
  static const json request = json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in \"Paris\"?"},
      {"role": "assistant", "content": "", "reasoning_content": "think",
       "tool_calls": [{"type": "function", "function": {"name": "get\"weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get\"weather", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
  })");
  return request;
}

const std::vector<ChatTemplate>& family_templates() {
  static const std::vector<ChatTemplate> templates = [] {
    std::ifstream in(std::string(BRIOCHE_SOURCE_DIR) + "/tests/template/golden/chat_templates.json");
    std::stringstream text;
    text << in.rdbuf();
    const json golden = json::parse(text.str());
    std::vector<ChatTemplate> out;
    for (const auto& [name, family] : golden["families"].items())
      out.push_back(ChatTemplate::parse(family["template"].get<std::string>(), name, fuzz_limits()));
    if (out.empty()) std::abort();  // the golden file is missing: the fuzzer would test nothing
    return out;
  }();
  return templates;
}

brioche::tmpl::ChatRequest request_from(const json& body) {
  brioche::tmpl::ChatRequest request;
  request.add_generation_prompt = true;
  request.bos_token = "<s>";
  request.eos_token = "</s>";
  if (body.is_array()) {
    request.messages = body;
  } else if (body.is_object()) {
    if (body.contains("messages")) request.messages = body["messages"];
    if (body.contains("tools")) request.tools = body["tools"];
    if (body.contains("kwargs") && body["kwargs"].is_object()) request.extra = body["kwargs"];
  }
  return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    try {
      auto tmpl = ChatTemplate::parse(std::string(text), "fuzz", fuzz_limits());
      std::string out = brioche::tmpl::render_chat(tmpl, request_from(fixed_request()));
      if (out.size() > fuzz_limits().max_output_bytes) std::abort();  // the output limit did not hold
    } catch (const brioche::Error&) {
    }
    return 0;
  }
  json body;
  try {
    body = brioche::parse_json_bounded<json>(text, "fuzz request");
  } catch (const brioche::Error&) {
    return 0;
  } catch (const nlohmann::json::exception&) {  // "1e999": parse_json_bounded lets out_of_range through
    return 0;
  }
  for (const ChatTemplate& tmpl : family_templates()) {
    try {
      brioche::tmpl::render_chat(tmpl, request_from(body));
    } catch (const brioche::Error&) {
    }
  }
  return 0;
}
