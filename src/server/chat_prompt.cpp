#include "server/chat_prompt.h"

namespace brioche::server {

struct ChatPrompter::Compiled {};

ChatPrompter::ChatPrompter(std::string template_source, std::string bos_text, std::string eos_text)
    : source_(std::move(template_source)), bos_(std::move(bos_text)), eos_(std::move(eos_text)) {}

ChatPrompter::~ChatPrompter() = default;

std::string ChatPrompter::render(const ChatPromptInput& input) const { return render_fallback_chat(input); }

std::string render_fallback_chat(const ChatPromptInput& input) {
  std::string out;
  std::string tool_block;
  if (input.tools.is_array() && !input.tools.empty()) {
    tool_block = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : input.tools) tool_block += "\n" + t.dump();
    tool_block += "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  }
  bool system_done = false;
  for (size_t i = 0; i < input.messages.size(); ++i) {
    const auto& m = input.messages[i];
    std::string role = m.value("role", "user");
    std::string content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    if (role == "system" && i == 0) {
      out += "<|im_start|>system\n" + content + tool_block + "<|im_end|>\n";
      system_done = true;
      continue;
    }
    if (!system_done && !tool_block.empty()) {
      out += "<|im_start|>system\n" + tool_block.substr(2) + "<|im_end|>\n";
    }
    system_done = true;
    if (role == "tool") {
      out += "<|im_start|>user\n<tool_response>\n" + content + "\n</tool_response><|im_end|>\n";
      continue;
    }
    out += "<|im_start|>" + role + "\n" + content;
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"])
        out += "\n<tool_call>\n" + nlohmann::json{{"name", c["function"]["name"]}, {"arguments", c["function"].value("arguments", nlohmann::json::object())}}.dump() + "\n</tool_call>";
    out += "<|im_end|>\n";
  }
  out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace brioche::server
