#include "grammar/json_canonical.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace brioche::grammar {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int k = 0; k < 4; ++k) out += static_cast<char>(v >> (8 * k) & 0xFF);
}

// UTF-8 of a code point; surrogates (unpaired escapes) as their 3-byte form,
// so every code point sequence has its own bytes.
void put_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The decimal digits of an integral double of any size (|d| >= 2^63 too):
// d = m * 2^e with m < 2^53, multiplied out in base-1e9 limbs.
std::string integral_decimal(double d) {
  const bool negative = d < 0;
  d = std::fabs(d);
  std::string digits;
  if (d < 9.2e18) {
    digits = std::to_string(static_cast<uint64_t>(d));
  } else {
    int e = 0;
    const double frac = std::frexp(d, &e);  // d = frac * 2^e, 0.5 <= frac < 1
    uint64_t m = static_cast<uint64_t>(std::ldexp(frac, 53));
    e -= 53;                      // d = m * 2^e, e > 0 here
    std::vector<uint32_t> limbs;  // little-endian base 1e9
    while (m > 0) {
      limbs.push_back(static_cast<uint32_t>(m % 1000000000u));
      m /= 1000000000u;
    }
    for (int i = 0; i < e; ++i) {
      uint64_t carry = 0;
      for (uint32_t& l : limbs) {
        const uint64_t v = static_cast<uint64_t>(l) * 2 + carry;
        l = static_cast<uint32_t>(v % 1000000000u);
        carry = v / 1000000000u;
      }
      if (carry) limbs.push_back(static_cast<uint32_t>(carry));
    }
    digits = std::to_string(limbs.back());
    for (size_t i = limbs.size() - 1; i-- > 0;) {
      const std::string part = std::to_string(limbs[i]);
      digits += std::string(9 - part.size(), '0') + part;
    }
  }
  return negative && digits != "0" ? "-" + digits : digits;
}

class Canonicalizer {
 public:
  explicit Canonicalizer(std::string_view text) : t_(text) {}

  bool run(std::string& out) {
    blanks();
    if (!value(out, 0)) return false;
    blanks();
    return i_ == t_.size();
  }

 private:
  static constexpr int kMaxDepth = 512;

  void blanks() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (t_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  bool value(std::string& out, int depth) {
    if (i_ >= t_.size() || depth > kMaxDepth) return false;
    const char c = t_[i_];
    if (c == '"') {
      out += 's';
      return string(out);
    }
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == 't') return literal("true") && (out += 't', true);
    if (c == 'f') return literal("false") && (out += 'f', true);
    if (c == 'n') return literal("null") && (out += 'n', true);
    return number(out);
  }

  // 's' was written; appends the length and the decoded bytes.
  bool string(std::string& out) {
    ++i_;  // the opening quote
    std::string decoded;
    while (true) {
      if (i_ >= t_.size()) return false;
      const char c = t_[i_++];
      if (c == '"') break;
      if (c != '\\') {
        decoded += c;  // raw bytes (UTF-8) are the characters already
        continue;
      }
      if (i_ >= t_.size()) return false;
      const char e = t_[i_++];
      switch (e) {
        case '"': decoded += '"'; break;
        case '\\': decoded += '\\'; break;
        case '/': decoded += '/'; break;
        case 'b': decoded += '\b'; break;
        case 'f': decoded += '\f'; break;
        case 'n': decoded += '\n'; break;
        case 'r': decoded += '\r'; break;
        case 't': decoded += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          // A high surrogate escape followed by a low one is one character
          // (Python's json joins them); either alone stays itself.
          if (cp >= 0xD800 && cp <= 0xDBFF && t_.substr(i_, 2) == "\\u") {
            const size_t save = i_;
            i_ += 2;
            uint32_t low = 0;
            if (hex4(low) && low >= 0xDC00 && low <= 0xDFFF)
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            else
              i_ = save;
          }
          put_code_point(decoded, cp);
          break;
        }
        default: return false;
      }
    }
    put_u32(out, static_cast<uint32_t>(decoded.size()));
    out += decoded;
    return true;
  }
  bool hex4(uint32_t& cp) {
    if (i_ + 4 > t_.size()) return false;
    for (int k = 0; k < 4; ++k) {
      const char h = t_[i_++];
      const int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (v < 0) return false;
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    return true;
  }

  bool number(std::string& out) {
    const size_t begin = i_;
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    const size_t int_begin = i_;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    if (i_ == int_begin) return false;
    bool integer = true;
    if (i_ < t_.size() && t_[i_] == '.') {
      integer = false;
      const size_t frac = ++i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ == frac) return false;
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      const size_t exp = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ == exp) return false;
    }
    if (integer) {
      // Python's int: exact, "-0" is 0.
      std::string_view digits = t_.substr(int_begin, i_ - int_begin);
      while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
      out += 'i';
      if (t_[begin] == '-' && digits != "0") out += '-';
      out += digits;
      out += ';';
      return true;
    }
    // Python's float: the nearest double (inf past the range); equal to an
    // int exactly when integral with the same value.
    const std::string spelled(t_.substr(begin, i_ - begin));
    errno = 0;
    const double d = std::strtod(spelled.c_str(), nullptr);
    if (std::isinf(d)) {
      out += d > 0 ? "I+" : "I-";
    } else if (d == std::floor(d)) {
      out += 'i';
      out += integral_decimal(d);
      out += ';';
    } else {
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      out += 'd';
      for (int k = 0; k < 8; ++k) out += static_cast<char>(bits >> (8 * k) & 0xFF);
    }
    return true;
  }

  bool array(std::string& out, int depth) {
    ++i_;
    out += 'a';
    blanks();
    if (i_ < t_.size() && t_[i_] == ']') {
      ++i_;
      out += ']';
      return true;
    }
    while (true) {
      blanks();
      if (!value(out, depth + 1)) return false;
      blanks();
      if (i_ >= t_.size()) return false;
      const char c = t_[i_++];
      if (c == ']') break;
      if (c != ',') return false;
    }
    out += ']';
    return true;
  }

  bool object(std::string& out, int depth) {
    ++i_;
    std::vector<std::pair<std::string, std::string>> members;  // (key form, value form)
    blanks();
    if (i_ < t_.size() && t_[i_] == '}') {
      ++i_;
    } else {
      while (true) {
        blanks();
        if (i_ >= t_.size() || t_[i_] != '"') return false;
        std::string key = "s", val;
        if (!string(key)) return false;
        blanks();
        if (i_ >= t_.size() || t_[i_++] != ':') return false;
        blanks();
        if (!value(val, depth + 1)) return false;
        // A repeated key: the last value counts (Python's dict).
        auto same = std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.first == key; });
        if (same != members.end())
          same->second = std::move(val);
        else
          members.emplace_back(std::move(key), std::move(val));
        blanks();
        if (i_ >= t_.size()) return false;
        const char c = t_[i_++];
        if (c == '}') break;
        if (c != ',') return false;
      }
    }
    std::sort(members.begin(), members.end());
    out += 'o';
    put_u32(out, static_cast<uint32_t>(members.size()));
    for (const auto& [k, v] : members) {
      out += k;
      out += v;
    }
    return true;
  }

  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

bool canonical_json(std::string_view text, std::string& out) {
  const size_t size = out.size();
  if (Canonicalizer(text).run(out)) return true;
  out.resize(size);
  return false;
}

}  // namespace brioche::grammar
