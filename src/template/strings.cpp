#include "template/strings.h"

#include <algorithm>

#include "template/value.h"

namespace brioche::tmpl {

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string text = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_me = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && strip_me(text[begin])) ++begin;
  if (right)
    while (end > begin && strip_me(text[end - 1])) --end;
  return utf8_encode(std::u32string_view(text).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) render_fail("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit != 0) {
        size_t at = s.find(*sep, pos);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, at - pos));
        pos = at + sep->size();
        --maxsplit;
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit != 0 && end >= sep->size()) {
        size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
        --maxsplit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace split: runs of whitespace separate, empty strings never appear.
  std::u32string text = utf8_decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < text.size() && py_isspace(text[i])) ++i;
      if (i >= text.size()) break;
      if (maxsplit == 0) {
        size_t end = text.size();
        while (end > i && py_isspace(text[end - 1])) --end;
        parts.push_back(utf8_encode(text.substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < text.size() && !py_isspace(text[j])) ++j;
      parts.push_back(utf8_encode(text.substr(i, j - i)));
      i = j;
      --maxsplit;
    }
  } else {
    size_t i = text.size();
    while (true) {
      while (i > 0 && py_isspace(text[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit == 0) {
        size_t begin = 0;
        while (begin < i && py_isspace(text[begin])) ++begin;
        parts.push_back(utf8_encode(text.substr(begin, i - begin)));
        break;
      }
      size_t j = i;
      while (j > 0 && !py_isspace(text[j - 1])) --j;
      parts.push_back(utf8_encode(text.substr(j, i - j)));
      i = j;
      --maxsplit;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    std::u32string text = utf8_decode(s);
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count != 0) {
        out += replacement;
        --count;
        check_bytes(out.size(), "str.replace() result");  // "x".replace("", huge) grows by len(huge) per character
      }
      if (i < text.size()) utf8_append(out, text[i]);
    }
    return out;
  }
  size_t pos = 0;
  while (count != 0) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(replacement);
    check_bytes(out.size(), "str.replace() result");
    pos = at + old.size();
    --count;
  }
  out.append(s.substr(pos));
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string text = utf8_decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t c = text[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    lines.push_back(utf8_encode(text.substr(start, i - start)));
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < text.size()) lines.push_back(utf8_encode(text.substr(start)));
  return lines;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(utf8_decode(s).size()) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return int64_t(utf8_decode(s.substr(0, at)).size());
}

static char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c >= 0x100 && c <= 0x17f && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_upper ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;  // Greek
  if (c >= 0x430 && c <= 0x44f) return c - 32;                // Cyrillic
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

static char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x178 && c != 0x138 && c != 0x149 && c != 0x17f) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_upper ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

static bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }
static bool is_lower_char(char32_t c) { return to_upper(c) != c; }
static bool is_upper_char(char32_t c) { return to_lower(c) != c; }

static std::string map_chars(std::string_view s, char32_t (*fn)(char32_t)) {
  std::u32string text = utf8_decode(s);
  for (auto& c : text) c = fn(c);
  return utf8_encode(text);
}

std::string py_upper(std::string_view s) { return map_chars(s, to_upper); }
std::string py_lower(std::string_view s) { return map_chars(s, to_lower); }

std::string py_capitalize(std::string_view s) {
  std::u32string text = utf8_decode(s);
  for (size_t i = 0; i < text.size(); ++i) text[i] = i == 0 ? to_upper(text[i]) : to_lower(text[i]);
  return utf8_encode(text);
}

std::string py_title(std::string_view s) {
  std::u32string text = utf8_decode(s);
  bool previous_cased = false;
  for (auto& c : text) {
    c = previous_cased ? to_lower(c) : to_upper(c);
    previous_cased = is_cased(c);
  }
  return utf8_encode(text);
}

std::string jinja_title(std::string_view s) {
  std::u32string text = utf8_decode(s);
  bool word_start = true;
  for (auto& c : text) {
    bool separator = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return utf8_encode(text);
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (is_upper_char(c)) return false;
    any |= is_lower_char(c);
  }
  return any;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (is_lower_char(c)) return false;
    any |= is_upper_char(c);
  }
  return any;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace brioche::tmpl
