#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace brioche::tokenizer {

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = next_codepoint(text, pos);
    if (cp >= alphabet.codepoint_to_byte.size() || alphabet.codepoint_to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(alphabet.codepoint_to_byte[cp]));
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, alphabet.byte_to_codepoint[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace brioche::tokenizer
