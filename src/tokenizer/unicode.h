// UTF-8 helpers and Unicode NFC for the tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace brioche::tokenizer {

// Length of the UTF-8 sequence that starts with `lead` (1 for stray
// continuation bytes and invalid leads, so scanning always advances).
inline size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

void append_utf8(std::string& out, uint32_t codepoint);

// Decodes one code point at text[pos]; advances pos. Invalid bytes decode as
// U+FFFD and advance by one.
uint32_t next_codepoint(std::string_view text, size_t& pos);

// Length of the longest prefix of `bytes` that is complete UTF-8, leaving out
// a trailing sequence that could still be completed by more bytes.
size_t complete_utf8_prefix(std::string_view bytes);

bool is_valid_utf8(std::string_view bytes);

// Replaces every maximal invalid subsequence with U+FFFD (like Rust's
// String::from_utf8_lossy, which Hugging Face decoders use).
std::string utf8_lossy(std::string_view bytes);

// Unicode Normalization Form C (canonical decomposition, canonical ordering,
// canonical composition). ASCII-only and already-composed text is returned
// without running the full algorithm.
std::string nfc(std::string_view text);
const char* nfc_unicode_version();

}  // namespace brioche::tokenizer
