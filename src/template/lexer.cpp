// Hand-written equivalent of Jinja's regex lexer (jinja2/lexer.py) for the
// default delimiters, with trim_blocks=True and lstrip_blocks=True.
#include "template/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "template/value.h"

namespace brioche::tmpl {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Jinja's newline handling: "\r\n" and "\r" become "\n", and one trailing
// newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(normalize_newlines(source)), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous token ended a line (or nothing came before)
    while (pos < src_.size()) {
      size_t open = find_tag_open(pos);
      if (open == std::string::npos) {
        push_data(src_.substr(pos), pos);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      std::string text = src_.substr(pos, open - pos);
      size_t raw_end = kind == '%' ? match_raw_begin(open) : 0;
      strip_before_tag(text, sign, kind != '{', line_starting);
      push_data(std::move(text), pos);
      size_t body = open + 2 + (sign ? 1 : 0);
      if (raw_end) {
        pos = lex_raw(raw_end);
      } else if (kind == '#') {
        pos = skip_comment(open, body);
      } else {
        pos = lex_tag(open, body, kind == '%');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::End, "", 0, 0, location(src_.size()).line, location(src_.size()).column});
    return std::move(tokens_);
  }

 private:
  SourceLocation location(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = size_t(it - line_starts_.begin());
    return {int(line), int(offset - line_starts_[line - 1]) + 1};
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    SourceLocation loc = location(offset);
    fail(name_, ":", loc.line, ":", loc.column, ": ", what);
  }

  size_t find_tag_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void push_data(std::string text, size_t offset) {
    if (text.empty()) return;
    SourceLocation loc = location(offset);
    tokens_.push_back(Token{TokenKind::Data, std::move(text), 0, 0, loc.line, loc.column});
  }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks drops
  // spaces/tabs between the start of the line and a block or comment tag.
  static void strip_before_tag(std::string& text, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && block_or_comment) {
      size_t line_pos = text.rfind('\n');
      line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
      if ((line_pos > 0 || line_starting) && line_pos < text.size() &&
          std::all_of(text.begin() + long(line_pos), text.end(), is_space))
        text.resize(line_pos);
    }
  }

  // After a tag's closing delimiter: `-` eats all whitespace, `+` nothing,
  // plain eats one newline when `trims` (block and comment tags, not {{ }}).
  size_t after_close(size_t close_end, char sign, bool trims) const {
    if (sign == '-') {
      while (close_end < src_.size() && is_space(src_[close_end])) ++close_end;
    } else if (sign != '+' && trims && close_end < src_.size() && src_[close_end] == '\n') {
      ++close_end;
    }
    return close_end;
  }

  size_t skip_spaces(size_t i) const {
    while (i < src_.size() && is_space(src_[i])) ++i;
    return i;
  }

  bool word_at(size_t i, const char* word) const {
    size_t n = std::strlen(word);
    return src_.compare(i, n, word) == 0 && (i + n >= src_.size() || !is_name_char(src_[i + n]));
  }

  // `{% raw %}`: returns the offset after the opening tag, or 0.
  size_t match_raw_begin(size_t open) const {
    size_t i = open + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_spaces(i);
    if (!word_at(i, "raw")) return 0;
    i = skip_spaces(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) return skip_spaces(i + 3);
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return 0;
  }

  size_t lex_raw(size_t content_start) {
    for (size_t i = src_.find("{%", content_start); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      j = skip_spaces(j + (sign ? 1 : 0));
      if (!word_at(j, "endraw")) continue;
      j = skip_spaces(j + 6);
      char close_sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) close_sign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(content_start, i - content_start);
      strip_before_tag(text, sign, true, false);
      push_data(std::move(text), content_start);
      return after_close(j + 2, close_sign, true);
    }
    fail_at(content_start, "missing {% endraw %} for this raw block");
  }

  size_t skip_comment(size_t open, size_t body) const {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail_at(open, "missing end of comment tag '#}'");
    char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    return after_close(close + 2, sign, true);
  }

  // Tokens inside {{ }} or {% %} until the closing delimiter; brackets must
  // balance first so that `{{ {'a': {'b': 1}} }}` lexes as Jinja does.
  size_t lex_tag(size_t open, size_t body, bool block) {
    SourceLocation loc = location(open);
    tokens_.push_back(Token{block ? TokenKind::BlockBegin : TokenKind::VarBegin, "", 0, 0, loc.line, loc.column});
    std::string brackets;
    size_t i = body;
    const char* close = block ? "%}" : "}}";
    while (true) {
      i = skip_spaces(i);
      if (i >= src_.size())
        fail_at(open, std::string("unexpected end of template, expected '") + close + "' to close this tag");
      if (brackets.empty()) {
        char sign = (src_[i] == '-' || (block && src_[i] == '+')) ? src_[i] : 0;
        if (src_.compare(i + (sign ? 1 : 0), 2, close) == 0) {
          SourceLocation end_loc = location(i);
          tokens_.push_back(
              Token{block ? TokenKind::BlockEnd : TokenKind::VarEnd, "", 0, 0, end_loc.line, end_loc.column});
          return after_close(i + (sign ? 1 : 0) + 2, sign, block);
        }
      }
      i = lex_token(i, brackets);
    }
  }

  size_t lex_token(size_t i, std::string& brackets) {
    SourceLocation loc = location(i);
    Token tok{TokenKind::Operator, "", 0, 0, loc.line, loc.column};
    char c = src_[i];
    if (is_name_start(c)) {
      size_t j = i;
      while (j < src_.size() && is_name_char(src_[j])) ++j;
      tok.kind = TokenKind::Name;
      tok.text = src_.substr(i, j - i);
      tokens_.push_back(std::move(tok));
      return j;
    }
    if (is_digit(c)) return lex_number(i, std::move(tok));
    if (c == '\'' || c == '"') return lex_string(i, std::move(tok));
    static const char* two_char[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two_char) {
      if (src_.compare(i, 2, op) == 0) {
        tok.text = op;
        tokens_.push_back(std::move(tok));
        return i + 2;
      }
    }
    if (!std::strchr("+-/*%~[](){}><=.:|,;", c) || c == 0)
      fail_at(i, std::string("unexpected character '") + c + "' in tag");
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != want) fail_at(i, std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    tok.text = std::string(1, c);
    tokens_.push_back(std::move(tok));
    return i + 1;
  }

  size_t lex_number(size_t i, Token tok) {
    size_t j = i;
    auto digits = [&] {
      while (j < src_.size() && (is_digit(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1]))))
        ++j;
    };
    digits();
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && is_digit(src_[j + 1])) {
      is_float = true;
      ++j;
      digits();
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) {
        is_float = true;
        j = k;
        digits();
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k)
      if (src_[k] != '_') text += src_[k];
    if (is_float) {
      tok.kind = TokenKind::Float;
      tok.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      tok.kind = TokenKind::Integer;
      auto res = std::from_chars(text.data(), text.data() + text.size(), tok.int_value);
      if (res.ec != std::errc()) fail_at(i, "integer literal " + text + " does not fit in 64 bits");
    }
    tok.text = std::move(text);
    tokens_.push_back(std::move(tok));
    return j;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // String literal with Python's unicode-escape rules (unknown escapes stay).
  size_t lex_string(size_t i, Token tok) {
    char quote = src_[i];
    std::string value;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) fail_at(i, "unterminated string literal");
      char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++j;
        continue;
      }
      if (j + 1 >= src_.size()) fail_at(i, "unterminated string literal");
      char e = src_[j + 1];
      j += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            int h = j < src_.size() ? hex_value(src_[j]) : -1;
            if (h < 0) fail_at(j, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + char32_t(h);
            ++j;
          }
          if (cp > 0x10FFFF) fail_at(j, "escape is not a valid code point");
          utf8_append(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = char32_t(e - '0');
            for (int k = 0; k < 2 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k)
              cp = cp * 8 + char32_t(src_[j++] - '0');
            utf8_append(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    tok.kind = TokenKind::String;
    tok.text = std::move(value);
    tokens_.push_back(std::move(tok));
    return j + 1;
  }

  std::string src_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& template_name) {
  return Lexer(source, template_name).run();
}

}  // namespace brioche::tmpl
