// What the CUDA engine tests share: a tiny random Llama on the GPU whose
// token t reads "x<t>;" (no token's text is a prefix of another's, so a
// grammar over these texts allows whole tokens only and can leave exactly
// one allowed), grammars compiled over that vocabulary, and requests that
// run to their max_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../tools/gen_model_lib.h"
#include "engine/engine.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"
#include "model/device_weights.h"
#include "model/llama.h"

namespace brioche::engine::cuda_test {

inline constexpr int32_t kVocab = 1000;

inline std::string token_text(int32_t token) { return "x" + std::to_string(token) + ";"; }

class SemicolonCodec final : public TextCodec {
 public:
  explicit SemicolonCodec(std::vector<int32_t> eos = {}) : eos_(std::move(eos)) {}
  std::vector<int32_t> encode(std::string_view, const TextEncoding&) const override { return {1}; }
  std::vector<int32_t> eos_ids() const override { return eos_; }
  std::string token_bytes(int32_t token) const override { return token_text(token); }
  std::unique_ptr<TextStream> new_stream() const override {
    struct Stream final : TextStream {
      std::string push(int32_t token) override { return token_text(token); }
      std::string flush() override { return {}; }
    };
    return std::make_unique<Stream>();
  }

 private:
  std::vector<int32_t> eos_;
};

// A new model object each call (its own decode graphs), bf16 on the GPU.
inline std::shared_ptr<model::Model> tiny_cuda_llama(uint64_t seed) {
  const tools::ShapePreset tiny{"tiny", "llama", kVocab, 256, 512, 2, 4, 2, 64, 10000.0f, false, false};
  model::Checkpoint ck = tools::random_checkpoint(tiny, DType::BF16, seed);
  model::move_weights(ck, Device::CUDA);
  return std::make_shared<model::LlamaModel>(std::move(ck));
}

inline std::shared_ptr<const grammar::CompiledGrammar> compile(const std::string& ebnf) {
  std::vector<std::string> texts;
  for (int32_t t = 0; t < kVocab; ++t) texts.push_back(token_text(t));
  static grammar::GrammarCache cache(std::make_shared<grammar::Vocabulary>(texts, grammar::VocabularyOptions{}));
  return cache.get(grammar::Grammar::from_ebnf(ebnf));
}

inline GenerationRequest request(std::vector<int32_t> prompt, int32_t max_tokens, SamplingParams sampling = {}) {
  GenerationRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling = std::move(sampling);
  return r;
}

}  // namespace brioche::engine::cuda_test
