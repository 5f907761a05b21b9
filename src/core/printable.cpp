#include "core/printable.h"

#include <cstdint>

namespace brioche {

namespace {

// The length of the valid UTF-8 sequence of 2–4 bytes at text[i], or 0.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return uint8_t(text[k]); };
  const uint8_t lead = byte(i);
  size_t n;
  uint32_t cp;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07u;
  } else {
    return 0;  // ASCII is handled by the caller; 0x80–0xC1 and 0xF5–0xFF never lead
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  // C1 controls (U+0080–U+009F) act like ESC sequences on some terminals.
  if (cp <= 0x9F) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const uint8_t b = uint8_t(text[i]);
    if ((b >= 0x20 && b < 0x7F) || b == '\n' || b == '\t') {
      out += char(b);
      ++i;
      continue;
    }
    if (const size_t n = b >= 0x80 ? utf8_sequence_length(text, i) : 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
    ++i;
  }
  return out;
}

}  // namespace brioche
