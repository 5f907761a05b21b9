// A GGUF's tokenizer written back as the Hugging Face files it came from
// (tokenizer.json, tokenizer_config.json), so a model `brioche export` writes
// as a safetensors directory loads in transformers with its own tokenizer.
//
// Byte-level BPE (tokenizer.ggml.model "gpt2") only: the vocabulary and
// merges are stored in the GGUF as they were in tokenizer.json; the
// pre-tokenizer is rebuilt from tokenizer.ggml.pre (the same table the GGUF
// loader reads, tokenizer_gguf.cpp). SentencePiece ("llama") GGUFs are an
// error that names the way out (copy the files of the original model).
#pragma once

#include <nlohmann/json.hpp>

namespace brioche::formats {
class GgufFile;
}

namespace brioche::tokenizer {

struct HfTokenizerFiles {
  nlohmann::json tokenizer;         // tokenizer.json
  nlohmann::json tokenizer_config;  // tokenizer_config.json (special tokens, chat template)
};

// max_length: the model's trained context (tokenizer_config's model_max_length), 0 if unknown.
HfTokenizerFiles hf_tokenizer_files(const formats::GgufFile& gguf, int max_length);

}  // namespace brioche::tokenizer
