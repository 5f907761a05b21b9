// A GGUF tokenizer written back as tokenizer.json (tokenizer/hf_tokenizer_files.h)
// tokenizes as the GGUF does when read by our own tokenizer.json loader, on the
// default model (byte-level BPE, the "smollm" pre-tokenizer); transformers'
// reading of the same file is checked in tests/cli/export_hf_e2e_test.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/hf_tokenizer_files.h"
#include "tokenizer/tokenizer.h"

namespace brioche::tokenizer {
namespace {

std::string smollm2_path() {
  if (const char* env = std::getenv("BRIOCHE_DEFAULT_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(HfTokenizerFiles, RebuiltTokenizerJsonTokenizesAsTheGguf) {
  if (!std::filesystem::exists(smollm2_path()))
    GTEST_SKIP() << "skipped: default model not found at " << smollm2_path();
  auto gguf = formats::GgufFile::open(smollm2_path());
  const HfTokenizerFiles files = hf_tokenizer_files(*gguf, 8192);
  auto from_gguf = Tokenizer::from_gguf(*gguf);
  auto from_json = Tokenizer::from_tokenizer_json(files.tokenizer.dump(), files.tokenizer_config.dump());
  ASSERT_EQ(from_json->vocab_size(), from_gguf->vocab_size());
  EXPECT_EQ(from_json->bos_id(), from_gguf->bos_id());
  for (const char* text : {"Hello world!", "  spaces, digits 12345 and 67,890.1",
                           "Ünïcödé — émojis 🍞🥐 中文字符", "code:\n\tdef f(x):\n\t\treturn x**2\n",
                           "<|im_start|>user\nhi<|im_end|>\n", "don't we'll they've", "\n\n\n   \t end"}) {
    const auto ids = from_gguf->encode(text);
    EXPECT_EQ(from_json->encode(text), ids) << text;
    EXPECT_EQ(from_json->decode(ids), from_gguf->decode(ids)) << text;
  }
  EXPECT_EQ(files.tokenizer_config["eos_token"], "<|im_end|>");
  EXPECT_EQ(files.tokenizer_config["model_max_length"], 8192);
  EXPECT_NE(files.tokenizer_config["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
}

}  // namespace
}  // namespace brioche::tokenizer
