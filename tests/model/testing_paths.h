// Where the model tests find their goldens and the default model.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace brioche::model {

inline std::string golden_path(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/model/golden/" + name;
}

// ~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf, or
// $BRIOCHE_DEFAULT_MODEL when set.
inline std::string default_model_path() {
  if (const char* env = std::getenv("BRIOCHE_DEFAULT_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace brioche::model
