#include "eval/json_syntax.h"

#include <cctype>
#include <cstdint>

namespace brioche::eval {

namespace {

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : s_(text) {}

  bool document() {
    skip_space();
    if (!value(0)) return false;
    skip_space();
    return pos_ == s_.size();
  }

 private:
  static constexpr int kMaxDepth = 900;  // Python raises RecursionError near 1000 levels

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool digit() const { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; }

  bool value(int depth) {
    if (pos_ >= s_.size() || depth > kMaxDepth) return false;
    switch (s_[pos_]) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return string();
      case 'n': return literal("null");
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'N': return literal("NaN");
      case 'I': return literal("Infinity");
      case '-':
        if (s_.substr(pos_, 9) == "-Infinity") return literal("-Infinity");
        return number();
      default: return number();
    }
  }

  // -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?  ("1." and ".5" are not numbers)
  bool number() {
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (!digit()) return false;
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      const size_t dot = pos_++;
      if (!digit()) {
        pos_ = dot;  // Python's scanner stops before the '.', which then fails as extra data
        return true;
      }
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      const size_t e = pos_++;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) {
        pos_ = e;
        return true;
      }
      while (digit()) ++pos_;
    }
    return true;
  }

  bool string() {
    ++pos_;  // "
    while (pos_ < s_.size()) {
      const auto c = static_cast<uint8_t>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (++pos_ >= s_.size()) return false;
        const char e = s_[pos_];
        if (e == 'u') {
          for (int i = 1; i <= 4; ++i)
            if (pos_ + i >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_ + i]))) return false;
          pos_ += 4;
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return false;
        }
      }
      ++pos_;
    }
    return false;
  }

  bool array(int depth) {
    ++pos_;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_space();
      if (!value(depth + 1)) return false;
      skip_space();
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      if (s_[pos_++] != ',') return false;
    }
  }

  bool object(int depth) {
    ++pos_;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"' || !string()) return false;
      skip_space();
      if (pos_ >= s_.size() || s_[pos_++] != ':') return false;
      skip_space();
      if (!value(depth + 1)) return false;
      skip_space();
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      if (s_[pos_++] != ',') return false;
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

bool python_json_loads_ok(std::string_view text) { return JsonScanner(text).document(); }

}  // namespace brioche::eval
