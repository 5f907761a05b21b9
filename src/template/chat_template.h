// Chat templates: the Jinja templates stored in GGUF (tokenizer.chat_template)
// and tokenizer_config.json (chat_template), rendered as transformers'
// apply_chat_template(tokenize=False) renders them.
//
//   auto tmpl = ChatTemplate::parse(source, "qwen3");
//   std::string prompt = render_chat(tmpl, {.messages = msgs, .add_generation_prompt = true,
//                                           .extra = {{"enable_thinking", false}}, .eos_token = "<|im_end|>"});
//
// Errors (syntax, unknown filter, raise_exception, undefined values, limits)
// are brioche::Error "<name>:<line>:<col>: <what failed>".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "template/evaluator.h"

namespace brioche::tmpl {

class ChatTemplate {
 public:
  static ChatTemplate parse(std::string source, std::string name, RenderLimits limits = {});

  // context: a JSON object of top-level variables (key order is kept).
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const;
  const std::string& source() const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
};

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, tool_calls?, ...}]
  nlohmann::ordered_json tools = nullptr;                             // null or [tool schema, ...]
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // template kwargs: enable_thinking, ...
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// The context apply_chat_template builds: message keys whose value is null
// are dropped; a reasoning field (reasoning_content, thinking or reasoning)
// is copied to both `thinking` and `reasoning_content`; bos_token/eos_token,
// then `extra`, then messages/tools/documents(null)/add_generation_prompt.
nlohmann::ordered_json chat_context(const ChatRequest& request);
std::string render_chat(const ChatTemplate& tmpl, const ChatRequest& request);

// Fallback for models without a chat template. Each message becomes
//   "<Role>: <content>\n\n"
// with Role = System, User, Assistant or Tool (other roles capitalized),
// content parts joined by their text, and each assistant tool call appended
// as "\n<tool_call>{json}</tool_call>". With add_generation_prompt the prompt
// ends with "Assistant:". Tools, if any, come first as a system-like block:
//   "Tools: <json of the tool list>\n\n".
std::string plain_chat_format(const ChatRequest& request);

// tokenizer_config.json's chat_template is a string, or a list of
// {"name", "template"}; a list picks "tool_use" when tools are given and it
// exists, else "default". nullopt when there is no usable template.
std::optional<std::string> select_chat_template(const nlohmann::json& chat_template_field, bool has_tools);

}  // namespace brioche::tmpl
