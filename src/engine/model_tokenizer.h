// The tokenizer that belongs to a loaded model: from the GGUF metadata, or
// from tokenizer.json (+ tokenizer_config.json) next to safetensors weights.
#pragma once

#include <cstdint>
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
// directory without one, and when the tokenizer does not fit the model
// (check_tokenizer_fits_model).
std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const model::Model& model);
// The same from the parts: the GGUF file if the weights came from one, else
// the safetensors directory. No fit check (the parts carry no model).
std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const formats::GgufFile* gguf, const std::string& directory);

// Whether a tokenizer of `tokenizer_vocab` ids can drive a model whose
// embedding and lm_head have `model_rows` rows; throws brioche::Error naming
// `source` and both sizes when not (the rule and its why: model_tokenizer.cpp).
void check_tokenizer_fits_model(int32_t tokenizer_vocab, int32_t model_rows, const std::string& source);

}  // namespace brioche::engine
