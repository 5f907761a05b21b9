// libFuzzer target: tokenizer.json from a model directory is hostile input.
// The input is split at the first NUL into tokenizer.json and
// tokenizer_config.json; loading must succeed or throw brioche::Error, and a
// loaded tokenizer must encode a fixed text and decode the ids (or refuse
// with brioche::Error), every id inside its vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using brioche::tokenizer::Tokenizer;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string tokenizer_json = input.substr(0, nul);
  const std::string config_json = nul == std::string::npos ? std::string() : input.substr(nul + 1);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_tokenizer_json(tokenizer_json, config_json);
  } catch (const brioche::Error&) {
    return 0;
  }
  for (const char* text : {"Hello world! 123 <|im_end|> h\xC3\xA9llo \xF0\x9F\x98\x80  \n\tx", "\xFF\xFE bad", ""}) {
    try {
      const std::vector<int32_t> ids = tok->encode(text, {.add_special = true});
      for (int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) std::abort();  // encode made an id outside the vocabulary
      tok->decode(ids);
      tok->decode(ids, {.skip_special = true});
    } catch (const brioche::Error&) {
    }
  }
  for (int32_t id : {-1, tok->vocab_size(), 0}) {
    try {
      const int32_t one[] = {id};
      tok->decode(one);
    } catch (const brioche::Error&) {
    }
  }
  return 0;
}
