// GPT-2 byte-level alphabet: every byte maps to one printable code point, so
// a byte-level vocabulary can be stored as text. Printable Latin-1 bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map, in
// order, to U+0100, U+0101, ... (so ' ' -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace brioche::tokenizer {

struct ByteLevelAlphabet {
  std::array<uint32_t, 256> byte_to_codepoint{};
  // U+0000..U+01FF covers the whole image; -1 for code points outside it.
  std::array<int16_t, 512> codepoint_to_byte{};

  ByteLevelAlphabet() {
    codepoint_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_codepoint[b] = printable ? b : next_extra++;
      codepoint_to_byte[byte_to_codepoint[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelAlphabet& byte_level_alphabet();

// "Ġhello" -> " hello". nullopt if some character is not in the alphabet
// (Hugging Face then keeps the token's UTF-8 text as is).
std::optional<std::string> byte_level_decode(std::string_view text);
// " hello" -> "Ġhello".
std::string byte_level_encode(std::string_view bytes);

}  // namespace brioche::tokenizer
