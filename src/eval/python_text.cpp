#include "eval/python_text.h"

#include <algorithm>

namespace brioche::eval {

namespace {

struct CodepointRange {
  uint32_t first, last;
};
struct LowerMapping {
  uint32_t from;
  uint32_t to[3];  // up to three code points; 0 ends early
};

#include "eval/python_unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodepointRange (&ranges)[N], uint32_t cp) {
  const CodepointRange* end = ranges + N;
  const CodepointRange* it =
      std::upper_bound(ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

}  // namespace

uint32_t next_codepoint(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  size_t len = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || pos + len > text.size()) {
    ++pos;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? lead : len == 2 ? (lead & 0x1F) : len == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) {
      ++pos;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  pos += len;
  return cp;
}

std::vector<uint32_t> codepoints(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(next_codepoint(text, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool py_char_isupper(uint32_t cp) { return in_ranges(kPyUpper, cp); }
bool py_char_islower(uint32_t cp) { return in_ranges(kPyLower, cp); }
bool py_char_istitle(uint32_t cp) { return in_ranges(kPyTitle, cp); }
bool py_char_isalnum(uint32_t cp) { return in_ranges(kPyAlnum, cp); }
bool py_char_isalpha(uint32_t cp) { return in_ranges(kPyAlpha, cp); }
bool py_char_isdecimal(uint32_t cp) { return in_ranges(kPyDecimal, cp); }
bool py_char_isspace(uint32_t cp) { return in_ranges(kPySpace, cp); }

bool py_isupper(std::string_view text) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = next_codepoint(text, pos);
    if (py_char_islower(cp) || py_char_istitle(cp)) return false;
    if (py_char_isupper(cp)) cased = true;
  }
  return cased;
}

bool py_islower(std::string_view text) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = next_codepoint(text, pos);
    if (py_char_isupper(cp) || py_char_istitle(cp)) return false;
    if (py_char_islower(cp)) cased = true;
  }
  return cased;
}

std::string py_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  constexpr size_t n = sizeof(kPyLowerMap) / sizeof(kPyLowerMap[0]);
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = next_codepoint(text, pos);
    if (cp < 0x80) {
      out += (cp >= 'A' && cp <= 'Z') ? char(cp + 32) : char(cp);
      continue;
    }
    const LowerMapping* it = std::lower_bound(kPyLowerMap, kPyLowerMap + n, cp,
                                              [](const LowerMapping& m, uint32_t v) { return m.from < v; });
    if (it != kPyLowerMap + n && it->from == cp) {
      for (uint32_t c : it->to)
        if (c) append_utf8(out, c);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

namespace {

// Byte length of the whitespace code point ending at `end`, or 0.
size_t trailing_space(std::string_view text, size_t end) {
  size_t start = end;
  do {
    --start;
  } while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80 && end - start < 4);
  size_t pos = start;
  const uint32_t cp = next_codepoint(text, pos);
  return (pos == end && py_char_isspace(cp)) ? end - start : 0;
}

}  // namespace

std::string_view py_rstrip(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t n = trailing_space(text, end);
    if (n == 0) break;
    end -= n;
  }
  return text.substr(0, end);
}

std::string_view py_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t pos = begin;
    if (!py_char_isspace(next_codepoint(text, pos))) break;
    begin = pos;
  }
  return py_rstrip(text.substr(begin));
}

std::vector<std::string_view> py_split(std::string_view text) {
  std::vector<std::string_view> out;
  size_t pos = 0, word = std::string_view::npos;
  while (pos < text.size()) {
    const size_t start = pos;
    const bool space = py_char_isspace(next_codepoint(text, pos));
    if (space && word != std::string_view::npos) {
      out.push_back(text.substr(word, start - word));
      word = std::string_view::npos;
    } else if (!space && word == std::string_view::npos) {
      word = start;
    }
  }
  if (word != std::string_view::npos) out.push_back(text.substr(word));
  return out;
}

std::string_view strip_chars(std::string_view text, std::string_view chars) {
  const size_t begin = text.find_first_not_of(chars);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(chars) - begin + 1);
}

size_t py_len(std::string_view text) {
  size_t n = 0;
  for (size_t pos = 0; pos < text.size(); ++n) next_codepoint(text, pos);
  return n;
}

std::vector<std::string_view> split_on(std::string_view text, std::string_view sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t at; (at = text.find(sep, start)) != std::string_view::npos; start = at + sep.size())
    out.push_back(text.substr(start, at - start));
  out.push_back(text.substr(start));
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t at; (at = text.find(from, start)) != std::string_view::npos; start = at + from.size()) {
    out.append(text.substr(start, at - start));
    out.append(to);
  }
  out.append(text.substr(start));
  return out;
}

}  // namespace brioche::eval
