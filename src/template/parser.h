// Tokens -> syntax tree, following Jinja's grammar and operator precedence
// (jinja2/parser.py): condition < or < and < not < comparison < + - < ~ <
// * / // % < ** < unary - + < filters, tests, calls, attributes, subscripts.
#pragma once

#include <string>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace brioche::tmpl {

// Fails with brioche::Error "<name>:<line>:<col>: <what>".
Body parse_template(const std::vector<Token>& tokens, const std::string& template_name);

}  // namespace brioche::tmpl
