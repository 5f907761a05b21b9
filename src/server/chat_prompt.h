// Chat messages -> prompt text, through the model's chat template.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace brioche::server {

struct ChatPromptInput {
  const nlohmann::json& messages;  // normalized (string content)
  const nlohmann::json& tools;     // array or null
  std::optional<bool> enable_thinking;
};

class ChatPrompter {
 public:
  // `template_source`: the model's Jinja chat template, "" for none.
  ChatPrompter(std::string template_source, std::string bos_text, std::string eos_text);
  ~ChatPrompter();
  // Renders with add_generation_prompt. Throws brioche::Error on template failures.
  std::string render(const ChatPromptInput& input) const;
  const std::string& template_source() const { return source_; }

 private:
  std::string source_, bos_, eos_;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// The documented fallback for models without a template (ChatML):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// Tools are listed in the system turn with Hermes-style <tool_call> instructions.
std::string render_fallback_chat(const ChatPromptInput& input);

}  // namespace brioche::server
