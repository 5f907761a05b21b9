#include "engine/model_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/regular_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {

namespace {

// A model pads its embedding past the tokenizer by a few rows, never by many:
// Qwen2.5 by 399 of 152064 rows, Phi-3 by 53 of 32064, DeepSeek-V2 by 2385
// of 102400 (2.3%, the most seen). More than this is a tokenizer of another
// model.
int64_t max_padding_rows(int64_t model_rows) { return std::max<int64_t>(1024, model_rows / 8); }

}  // namespace

// The rule, where the tokenizer and the model meet at load:
//
// - A tokenizer with MORE ids than the model has rows is refused: it can
//   produce prompt ids the model cannot embed, so requests would fail one by
//   one with "token N is outside the vocabulary".
// - A model with more rows than the tokenizer has ids is padded, which is
//   common and legal (Qwen, Phi, DeepSeek pad to a multiple of 64..256 for
//   their kernels); it loads. The padding rows were never trained, so their
//   logits are far below the real ones and real models do not sample them in
//   practice; but the engine samples over every row (model_runner.cpp's
//   vocab_size is the rows) and a padded id that were sampled would fail in
//   the detokenizer ("token id N is out of range"). So the padding is bounded
//   (max_padding_rows): a model with 100,000 rows and a 49,152-id tokenizer
//   is a mismatched pair whose every request fails, and it is refused here,
//   at load, with one line. Banning ids >= the tokenizer's vocabulary in the
//   sampler would close the rare case for padded models too (engine/sampler).
void check_tokenizer_fits_model(int32_t tokenizer_vocab, int32_t model_rows, const std::string& source) {
  if (tokenizer_vocab > model_rows) {
    fail(source, ": tokenizer vocabulary: expected at most ", model_rows,
         " ids (the rows of the model's embedding and lm_head), found ", tokenizer_vocab, " (ids from ", model_rows,
         " up could not be embedded: a tokenizer of another model?)");
  }
  const int64_t padding = int64_t(model_rows) - tokenizer_vocab;
  if (padding > max_padding_rows(model_rows)) {
    fail(source, ": model vocabulary: expected the embedding's ", model_rows, " rows to exceed the tokenizer's ",
         tokenizer_vocab, " ids by padding of at most ", max_padding_rows(model_rows), " rows, found ", padding,
         " untrained rows that sampling would pick (a tokenizer of another model?)");
  }
}

std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const model::Model& model) {
  auto tok = load_model_tokenizer(model.gguf(), model.directory());
  const std::string source = model.gguf() != nullptr ? model.gguf()->path() : model.directory();
  check_tokenizer_fits_model(tok->vocab_size(), model.config().vocab_size, source);
  return tok;
}

std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const formats::GgufFile* gguf,
                                                           const std::string& directory) {
  if (gguf != nullptr) return tokenizer::Tokenizer::from_gguf(*gguf);
  // Bounded reads of regular files only: a FIFO or device named
  // tokenizer.json must be refused, not read forever (formats/regular_file.h).
  std::filesystem::path dir = directory;
  const std::string json_path = (dir / "tokenizer.json").string();
  auto json = formats::read_regular_file_if_present(json_path, formats::kMaxTokenizerJsonBytes);
  BRIOCHE_CHECK(json.has_value(), "expected ", json_path, " next to the model's weights");
  auto config =
      formats::read_regular_file_if_present((dir / "tokenizer_config.json").string(), formats::kMaxTokenizerJsonBytes);
  return tokenizer::Tokenizer::from_tokenizer_json(*json, config.value_or(""));
}

}  // namespace brioche::engine
