// Chat messages -> prompt text, through the model's chat template (template/
// layer: a Jinja subset rendering like transformers' apply_chat_template).
// A model without a template, or whose template fails to parse, uses the
// template layer's documented plain format (tmpl::plain_chat_format).
#pragma once

#include <memory>
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
  ChatPrompter(const std::string& template_source, std::string bos_text, std::string eos_text);
  ~ChatPrompter();
  // Renders with add_generation_prompt. Throws brioche::Error on template failures
  // (e.g. a template's raise_exception for an unsupported role order).
  std::string render(const ChatPromptInput& input) const;
  bool has_template() const;
  // Why the model's template was not usable ("" when it is, or when there is none).
  const std::string& template_problem() const { return problem_; }

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string bos_, eos_, problem_;
};

}  // namespace brioche::server
