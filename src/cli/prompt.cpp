#include "cli/prompt.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace brioche::cli {

std::vector<int32_t> raw_prompt_tokens(const engine::Engine& engine, const std::string& text) {
  return engine.tokenize(text, /*add_bos=*/true);
}

}  // namespace brioche::cli
