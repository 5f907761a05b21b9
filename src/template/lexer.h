// Template source -> tokens, with Jinja's whitespace control applied to the
// text between tags as transformers configures it: trim_blocks (drop the
// newline right after a block or comment tag), lstrip_blocks (drop spaces and
// tabs before a block or comment tag that starts its line), `-` (strip all
// whitespace on that side) and `+` (disable either trim).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::tmpl {

enum class TokenKind : uint8_t {
  Data,        // literal text to output (raw blocks too)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // text holds the decoded value
  Integer,
  Float,
  Operator,  // text holds the operator: "+", "//", "(", ...
  End,       // end of the template
};

struct Token {
  TokenKind kind;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

struct SourceLocation {
  int line = 1;
  int column = 1;
};

// Fails with brioche::Error "<name>:<line>:<col>: <what>" on malformed tags.
std::vector<Token> tokenize(std::string_view source, const std::string& template_name);

}  // namespace brioche::tmpl
