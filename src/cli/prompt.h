// Turning what the user typed into prompt tokens: the model's chat template
// for instruct models, or the raw text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace brioche::engine {
class Engine;
}

namespace brioche::cli {

// messages: [{"role": "...", "content": "..."}]. Renders the model's chat
// template (or the documented plain fallback when it has none) with a
// generation prompt and tokenizes the result.
std::vector<int32_t> chat_prompt_tokens(const engine::Engine& engine, const nlohmann::ordered_json& messages);

// The text as-is, with the model's bos token when it asks for one.
std::vector<int32_t> raw_prompt_tokens(const engine::Engine& engine, const std::string& text);

}  // namespace brioche::cli
