#include "server/chat_prompt.h"

#include "template/chat_template.h"

namespace brioche::server {

struct ChatPrompter::Compiled {
  std::optional<tmpl::ChatTemplate> chat_template;
};

ChatPrompter::ChatPrompter(const std::string& template_source, std::string bos_text, std::string eos_text)
    : compiled_(std::make_unique<Compiled>()), bos_(std::move(bos_text)), eos_(std::move(eos_text)) {
  if (template_source.empty()) return;
  try {
    compiled_->chat_template = tmpl::ChatTemplate::parse(template_source, "chat_template");
  } catch (const std::exception& e) {
    problem_ = e.what();  // reported at startup; prompts use the plain format
  }
}

ChatPrompter::~ChatPrompter() = default;

bool ChatPrompter::has_template() const { return compiled_->chat_template.has_value(); }

std::string ChatPrompter::render(const ChatPromptInput& input) const {
  tmpl::ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(input.messages.dump());
  if (input.tools.is_array() && !input.tools.empty()) request.tools = nlohmann::ordered_json::parse(input.tools.dump());
  request.add_generation_prompt = true;
  if (input.enable_thinking) request.extra["enable_thinking"] = *input.enable_thinking;
  if (!bos_.empty()) request.bos_token = bos_;
  if (!eos_.empty()) request.eos_token = eos_;
  if (compiled_->chat_template) return tmpl::render_chat(*compiled_->chat_template, request);
  return tmpl::plain_chat_format(request);
}

}  // namespace brioche::server
