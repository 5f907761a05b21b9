// libFuzzer target: real tokenizers (Qwen3 and Llama-3 byte-level, Llama-2
// byte-fallback; fixtures in tests/fixtures/tokenizers) encode any text;
// every id is in the vocabulary, the streaming detokenizer gives the same
// text as decode, and for valid UTF-8 decode(encode(x)) == x, up to what
// the vocabulary itself changes: Qwen3 normalizes to NFC, and Llama-2
// prepends "▁" to every piece between special tokens (so "<s>x" decodes
// as "<s> x", as in Hugging Face). The first byte picks the tokenizer and
// whether special-token strings are parsed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "tokenizer/golden_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using brioche::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> load(const std::string& family) {
  const std::string dir = std::string(BRIOCHE_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + family + "/";
  return Tokenizer::from_tokenizer_json(brioche::tokenizer::testing::read_zstd_file(dir + "tokenizer.json.zst"),
                                        brioche::tokenizer::testing::read_zstd_file(dir + "tokenizer_config.json.zst"));
}

enum Family { kQwen3, kLlama3, kLlama2 };

const Tokenizer& pick(Family family) {
  static const std::unique_ptr<Tokenizer> tokenizers[] = {load("qwen3"), load("llama3"), load("llama2")};
  return *tokenizers[family];
}

}  // namespace

// Loading three real vocabularies takes seconds under the sanitizers: done
// once here, outside the time libFuzzer allows each input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (Family family : {kQwen3, kLlama3, kLlama2}) pick(family);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Family family = static_cast<Family>(data[0] % 3);
  const Tokenizer& tok = pick(family);
  const bool parse_special = (data[0] / 3) % 2 == 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::vector<int32_t> ids = tok.encode(text, {.parse_special = parse_special});
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();  // an id outside the vocabulary
  const std::string decoded = tok.decode(ids);
  // Invalid UTF-8 is repaired (U+FFFD) before encoding, as Hugging Face's
  // Rust strings require; valid text must come back byte for byte.
  const bool round_trips = family != kLlama2 || !parse_special;
  if (round_trips && brioche::tokenizer::is_valid_utf8(text)) {
    const std::string expected = family == kQwen3 ? brioche::tokenizer::nfc(text) : std::string(text);
    if (decoded != expected) std::abort();
  }
  brioche::tokenizer::StreamingDetokenizer stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (streamed != decoded) std::abort();  // streaming and whole decode disagree
  return 0;
}
