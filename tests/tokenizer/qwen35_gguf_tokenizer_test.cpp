// tokenizer.ggml.pre "qwen35" (Qwen 3.5 GGUF files, llama.cpp's converter):
// the pre-tokenizer brioche reads it as is the one transformers'
// Qwen3_5Tokenizer writes into tokenizer.json (the oracle: the tokenizer.json
// of tests/fixtures/qwen35/mlx-dense, saved by transformers 5.25 through
// mlx-lm), and a GGUF tokenizer with it encodes as that tokenizer.json does.
// The GGUF is the llama.cpp-converted fixture with its pre set to qwen35.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "tokenizer/hf_tokenizer_files.h"
#include "tokenizer/tokenizer.h"

namespace brioche::tokenizer {
namespace {

std::string fixture(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/qwen35/" + name;
}

// The converted fixture's metadata and tensors with tokenizer.ggml.pre = qwen35.
std::shared_ptr<formats::GgufFile> with_qwen35_pre() {
  const auto f = formats::GgufFile::open(fixture("gguf/dense.f32.gguf"));
  formats::GgufWriter w;
  for (const auto& [key, value] : f->metadata())
    w.add(key, key == "tokenizer.ggml.pre" ? formats::GgufValue::string("qwen35") : value);
  for (const auto& t : f->tensors()) w.add_tensor(t.name, f->tensor(t.name));
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.serialize());
  return formats::GgufFile::parse(bytes->data(), bytes->size(), "qwen35-pre.gguf", bytes);
}

TEST(Qwen35GgufTokenizer, PreTokenizerIsTransformersQwen35) {
  std::ifstream in(fixture("mlx-dense/tokenizer.json"));
  const nlohmann::json written_by_transformers = nlohmann::json::parse(in);
  const auto gguf = with_qwen35_pre();
  const HfTokenizerFiles files = hf_tokenizer_files(*gguf, 4096);
  EXPECT_EQ(files.tokenizer["pre_tokenizer"], written_by_transformers["pre_tokenizer"]);
  EXPECT_EQ(files.tokenizer["normalizer"], written_by_transformers["normalizer"]);

  auto from_gguf = Tokenizer::from_gguf(*gguf);
  auto from_json = Tokenizer::from_tokenizer_json(written_by_transformers.dump(), "");
  // Including combining marks that NFC leaves in place (the pattern's \p{M}).
  for (const char* text : {"The quick brown fox", "cafe\xcc\x81 na\xc3\xafve e\xcc\x81t\xc3\xa9 ", "don't WE'LL 12345",
                           "tabs\tand\nnewlines\r\n  x", "a\xcc\x88\xcc\x81 mark-only \xcc\x81 piece"}) {
    EXPECT_EQ(from_gguf->encode(text), from_json->encode(text)) << text;
  }
}

}  // namespace
}  // namespace brioche::tokenizer
