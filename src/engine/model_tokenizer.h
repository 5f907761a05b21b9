// The tokenizer that belongs to a loaded model: from the GGUF metadata, or
// from tokenizer.json (+ tokenizer_config.json) next to safetensors weights.
#pragma once

#include <memory>
#include <string>

namespace brioche::formats {
class GgufFile;
}
namespace brioche::model {
class Model;
}
namespace brioche::tokenizer {
class Tokenizer;
}

namespace brioche::engine {

// Throws brioche::Error naming the missing tokenizer.json for a safetensors
// directory without one.
std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const model::Model& model);
// The same from the parts: the GGUF file if the weights came from one, else
// the safetensors directory.
std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const formats::GgufFile* gguf, const std::string& directory);

}  // namespace brioche::engine
