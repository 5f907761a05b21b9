// tokenizer.ggml.model "gemma4" (Gemma 4 GGUF files, llama.cpp's converter):
// SentencePiece-style BPE with listed merges and byte fallback. The GGUF
// fixture's tokenizer was converted from tests/fixtures/gemma4/gguf/
// tokenizer.json; the ids `tokenizers` gives that file
// (tokenizer_goldens.json, tools/oracle/gemma4_gguf_fixtures.py) are the
// oracle, and decoding gives the text back.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace brioche::tokenizer {
namespace {

std::string fixture(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/gemma4/gguf/" + name;
}

TEST(Gemma4GgufTokenizer, EncodesAsTokenizers) {
  const auto gguf = formats::GgufFile::open(fixture("mix.f32.gguf"));
  ASSERT_EQ(gguf->get_string("tokenizer.ggml.model", ""), "gemma4");
  auto tok = Tokenizer::from_gguf(*gguf);
  std::ifstream in(fixture("tokenizer_goldens.json"));
  const nlohmann::json goldens = nlohmann::json::parse(in);
  ASSERT_GE(goldens["cases"].size(), 5u);
  for (const nlohmann::json& c : goldens["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text), want) << text;
    EXPECT_EQ(tok->decode(want), text) << text;
  }
  // add_bos_token is true in the file: <bos> (id 2) first when asked.
  EXPECT_EQ(tok->encode("x", {.add_special = true}).front(), 2);
}

}  // namespace
}  // namespace brioche::tokenizer
