#include "template/parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "template/limits.h"

namespace brioche::tmpl {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Data: return "template text";
    case TokenKind::VarBegin: return "'{{'";
    case TokenKind::VarEnd: return "'}}'";
    case TokenKind::BlockBegin: return "'{%'";
    case TokenKind::BlockEnd: return "'%}'";
    case TokenKind::Name: return "name '" + t.text + "'";
    case TokenKind::String: return "string literal";
    case TokenKind::Integer:
    case TokenKind::Float: return "number " + t.text;
    case TokenKind::Operator: return "'" + t.text + "'";
    case TokenKind::End: return "end of template";
  }
  return "?";
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : toks_(tokens), name_(name) {}

  Body parse_all() {
    std::string ended_by;
    Body body = parse_body({}, ended_by);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& advance() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op) const { return cur().kind == TokenKind::Operator && cur().text == op; }
  bool is_name(const char* word) const { return cur().kind == TokenKind::Name && cur().text == word; }

  [[noreturn]] void fail_at(const Token& t, const std::string& what) const {
    fail(name_, ":", t.line, ":", t.column, ": ", what);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_at(cur(), std::string("expected '") + op + "', found " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::Name) fail_at(cur(), "expected a name, found " + describe(cur()));
    return advance().text;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::BlockEnd)
      fail_at(cur(), "expected '%}' to end the block tag, found " + describe(cur()));
    advance();
  }

  // Counts the parser's own recursion (blocks, brackets, unary operators),
  // so a hostile template cannot exhaust the stack while being parsed.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseNesting)
        p.fail_at(p.cur(), "the template nests blocks, brackets and operators more than " +
                               std::to_string(kMaxParseNesting) + " deep here; the limit is " +
                               std::to_string(kMaxParseNesting));
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Sets a finished node's height from its children's and refuses trees
  // taller than kMaxExpressionDepth. Chains (`a ~ b ~ c`, `x.a.b`, `f()()`,
  // `x | f | g`) grow the tree without parser recursion, so the parser's
  // DepthGuard does not see them; every composite node passes through here
  // before it becomes a child, which makes each stored height exact.
  ExprPtr sealed(ExprPtr e) {
    int height = 0;
    auto see = [&](const ExprPtr& child) {
      if (child) height = std::max(height, child->height);
    };
    for (const auto& x : e->operands) see(x);
    for (const auto& x : e->args) see(x);
    for (const auto& [key, x] : e->kwargs) see(x);
    e->height = height + 1;
    if (e->height > kMaxExpressionDepth) {
      Token at;
      at.line = e->line;
      at.column = e->column;
      fail_at(at, "the template nests expressions more than " + std::to_string(kMaxExpressionDepth) +
                      " deep here (each operator of a chain like a ~ b ~ c is one level); the limit is " +
                      std::to_string(kMaxExpressionDepth));
    }
    return e;
  }

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // ---- statements ----
  // Parses until a block tag named in end_tags (consumed, name in ended_by)
  // or the end of the template (only valid when end_tags is empty).
  Body parse_body(std::initializer_list<const char*> end_tags, std::string& ended_by) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::End) {
        if (end_tags.size() == 0) return body;
        std::string want;
        for (const char* tag : end_tags) want += std::string(want.empty() ? "" : " or ") + "'" + tag + "'";
        fail_at(t, "unexpected end of template, expected " + want + " (block opened at line " +
                       std::to_string(open_lines_.empty() ? 0 : open_lines_.back()) + ")");
      }
      if (t.kind == TokenKind::Data) {
        auto s = stmt(StmtKind::Text, t);
        s->text = t.text;
        advance();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::VarBegin) {
        advance();
        auto s = stmt(StmtKind::Print, t);
        s->expr = parse_tuple_or_expr(true);
        if (cur().kind != TokenKind::VarEnd)
          fail_at(cur(), "expected '}}' to end the expression, found " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::BlockBegin) {
        advance();
        const Token& keyword = cur();
        if (keyword.kind != TokenKind::Name)
          fail_at(keyword, "expected a tag name after '{%', found " + describe(keyword));
        for (const char* tag : end_tags) {
          if (keyword.text == tag) {
            ended_by = tag;
            advance();
            return body;
          }
        }
        body.push_back(parse_statement(end_tags));
      } else {
        fail_at(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement(std::initializer_list<const char*> end_tags) {
    const Token& keyword = cur();
    const std::string& k = keyword.text;
    open_lines_.push_back(keyword.line);
    StmtPtr result;
    if (k == "if")
      result = parse_if();
    else if (k == "for")
      result = parse_for();
    else if (k == "set")
      result = parse_set();
    else if (k == "macro")
      result = parse_macro();
    else if (k == "break" || k == "continue") {
      advance();
      result = stmt(k == "break" ? StmtKind::Break : StmtKind::Continue, keyword);
      expect_block_end();
    } else if (k == "filter")
      result = parse_filter_block();
    else if (k == "generation") {
      advance();
      result = stmt(StmtKind::Generation, keyword);
      expect_block_end();
      std::string ended_by;
      result->body = parse_body({"endgeneration"}, ended_by);
      expect_block_end();
    } else {
      std::string msg = "encountered unknown tag '" + k + "'";
      if (end_tags.size() > 0) {
        msg += "; expected";
        for (const char* tag : end_tags) msg += std::string(" '") + tag + "'";
      }
      if (k == "include" || k == "extends" || k == "import" || k == "from" || k == "block" || k == "call")
        msg = "tag '" + k + "' is not supported in chat templates";
      fail_at(keyword, msg);
    }
    open_lines_.pop_back();
    return result;
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::If, advance());
    while (true) {
      ExprPtr cond = parse_tuple_or_expr(false);
      expect_block_end();
      std::string ended_by;
      Body body = parse_body({"elif", "else", "endif"}, ended_by);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (ended_by == "elif") continue;
      if (ended_by == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, ended_by);
      }
      expect_block_end();
      return s;
    }
  }

  void parse_targets(Stmt& s) {
    bool paren = is_op("(");
    if (paren) advance();
    s.targets.push_back(expect_name());
    while (is_op(",")) {
      advance();
      s.target_is_tuple = true;
      if (cur().kind != TokenKind::Name) break;  // trailing comma
      s.targets.push_back(expect_name());
    }
    if (paren) {
      s.target_is_tuple = true;
      expect_op(")");
    }
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::For, advance());
    parse_targets(*s);
    if (!is_name("in")) fail_at(cur(), "expected 'in' in for loop, found " + describe(cur()));
    advance();
    s->expr = parse_tuple_or_expr(false, /*allow_condition=*/false);
    if (is_name("if")) {
      advance();
      s->filter = parse_expr();
    }
    if (is_name("recursive")) fail_at(cur(), "recursive for loops are not supported");
    expect_block_end();
    std::string ended_by;
    s->body = parse_body({"else", "endfor"}, ended_by);
    if (ended_by == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, ended_by);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = advance();
    if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == ".") {
      auto s = stmt(StmtKind::SetAttr, at);
      s->targets.push_back(advance().text);
      advance();  // '.'
      s->text = expect_name();
      expect_op("=");
      s->expr = parse_tuple_or_expr(true);
      expect_block_end();
      return s;
    }
    auto s = stmt(StmtKind::Set, at);
    parse_targets(*s);
    if (is_op("=")) {
      advance();
      s->expr = parse_tuple_or_expr(true);
      expect_block_end();
      return s;
    }
    if (s->target_is_tuple) fail_at(cur(), "a block set takes a single name");
    s->kind = StmtKind::SetBlock;
    if (is_op("|")) s->filter = parse_filter_chain();
    expect_block_end();
    std::string ended_by;
    s->body = parse_body({"endset"}, ended_by);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::Macro, advance());
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_name());
      if (is_op("=")) {
        advance();
        s->defaults.push_back(parse_expr());
      } else {
        if (!s->defaults.empty() && s->defaults.back()) fail_at(cur(), "non-default argument follows default argument");
        s->defaults.push_back(nullptr);
      }
    }
    advance();
    expect_block_end();
    std::string ended_by;
    s->body = parse_body({"endmacro"}, ended_by);
    if (cur().kind == TokenKind::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // `| f(args) | g` applied to a stand-in literal that is replaced by the block's rendered text.
  ExprPtr parse_filter_chain() {
    ExprPtr chain = node(ExprKind::Literal, cur());
    while (is_op("|")) chain = parse_filter(std::move(chain));
    return chain;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt(StmtKind::FilterBlock, advance());
    ExprPtr chain = node(ExprKind::Literal, cur());
    chain = parse_filter(std::move(chain), /*pipe_consumed=*/true);
    while (is_op("|")) chain = parse_filter(std::move(chain));
    s->filter = std::move(chain);
    expect_block_end();
    std::string ended_by;
    s->body = parse_body({"endfilter"}, ended_by);
    expect_block_end();
    return s;
  }

  // ---- expressions ----
  // An expression, or a bare tuple `a, b` where Jinja allows one.
  ExprPtr parse_tuple_or_expr(bool allow_tuple, bool allow_condition = true) {
    const Token& at = cur();
    ExprPtr first = allow_condition ? parse_expr() : parse_or();
    if (!allow_tuple || !is_op(",")) return first;
    auto tuple = node(ExprKind::TupleLit, at);
    tuple->operands.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (cur().kind == TokenKind::BlockEnd || cur().kind == TokenKind::VarEnd) break;
      tuple->operands.push_back(allow_condition ? parse_expr() : parse_or());
    }
    return sealed(std::move(tuple));
  }

  ExprPtr parse_expr() {
    DepthGuard guard(*this);
    ExprPtr value = parse_or();
    while (is_name("if")) {
      const Token& at = advance();
      auto cond = node(ExprKind::Condition, at);
      cond->operands.push_back(parse_or());
      cond->operands.push_back(std::move(value));
      if (is_name("else")) {
        advance();
        cond->operands.push_back(parse_expr());
      } else {
        cond->operands.push_back(nullptr);
      }
      value = sealed(std::move(cond));
    }
    return value;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = node(ExprKind::Or, advance());
      e->operands.push_back(std::move(left));
      e->operands.push_back(parse_and());
      left = sealed(std::move(e));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = node(ExprKind::And, advance());
      e->operands.push_back(std::move(left));
      e->operands.push_back(parse_not());
      left = sealed(std::move(e));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = node(ExprKind::Unary, advance());
      e->name = "not";
      e->operands.push_back(parse_not());
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::Operator && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                                cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = advance().text;
      } else if (is_name("in")) {
        advance();
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::Compare, at);
        cmp->operands.push_back(std::move(first));
      }
      cmp->compare_ops.push_back(op);
      cmp->operands.push_back(parse_math1());
    }
    return cmp ? sealed(std::move(cmp)) : std::move(first);
  }

  ExprPtr binary(ExprPtr left, const Token& at, std::string op, ExprPtr right) {
    auto e = node(ExprKind::Binary, at);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return sealed(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = advance();
      left = binary(std::move(left), at, at.text, parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = advance();
      left = binary(std::move(left), at, "~", parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = advance();
      left = binary(std::move(left), at, at.text, parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = advance();
      left = binary(std::move(left), at, "**", parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = advance();
      e = node(ExprKind::Unary, at);
      e->name = at.text;
      e->operands.push_back(parse_unary(false));
      e = sealed(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    switch (t.kind) {
      case TokenKind::Name: {
        advance();
        auto e = node(ExprKind::Literal, t);
        if (t.text == "true" || t.text == "True")
          e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          e->literal = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::String: {
        auto e = node(ExprKind::Literal, t);
        std::string s;
        while (cur().kind == TokenKind::String) s += advance().text;  // adjacent literals concatenate
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::Integer: {
        advance();
        auto e = node(ExprKind::Literal, t);
        e->literal = Value::integer(t.int_value);
        return e;
      }
      case TokenKind::Float: {
        advance();
        auto e = node(ExprKind::Literal, t);
        e->literal = Value::floating(t.float_value);
        return e;
      }
      case TokenKind::Operator:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail_at(t, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_paren() {
    const Token& at = advance();
    if (is_op(")")) {
      advance();
      return node(ExprKind::TupleLit, at);
    }
    ExprPtr first = parse_expr();
    if (!is_op(",")) {
      expect_op(")");
      return first;
    }
    auto tuple = node(ExprKind::TupleLit, at);
    tuple->operands.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (is_op(")")) break;
      tuple->operands.push_back(parse_expr());
    }
    expect_op(")");
    return sealed(std::move(tuple));
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::ListLit, advance());
    while (!is_op("]")) {
      if (!e->operands.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      e->operands.push_back(parse_expr());
    }
    advance();
    return sealed(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::DictLit, advance());
    while (!is_op("}")) {
      if (!e->operands.empty()) {
        expect_op(",");
        if (is_op("}")) break;
      }
      e->operands.push_back(parse_expr());
      expect_op(":");
      e->operands.push_back(parse_expr());
    }
    advance();
    return sealed(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = advance();
        if (cur().kind == TokenKind::Integer) {
          auto item = node(ExprKind::GetItem, at);
          auto index = node(ExprKind::Literal, cur());
          index->literal = Value::integer(advance().int_value);
          item->operands.push_back(std::move(e));
          item->operands.push_back(std::move(index));
          e = sealed(std::move(item));
          continue;
        }
        auto attr = node(ExprKind::GetAttr, at);
        attr->name = expect_name();
        attr->operands.push_back(std::move(e));
        e = sealed(std::move(attr));
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token& at = advance();  // '['
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) fail_at(cur(), "too many ':' in slice");
        advance();
        continue;
      }
      if (parts[colons]) fail_at(cur(), "expected ']' or ':', found " + describe(cur()));
      parts[colons] = parse_expr();
    }
    advance();
    if (colons == 0) {
      if (!parts[0]) fail_at(at, "empty subscript '[]'");
      auto e = node(ExprKind::GetItem, at);
      e->operands.push_back(std::move(target));
      e->operands.push_back(std::move(parts[0]));
      return sealed(std::move(e));
    }
    auto e = node(ExprKind::Slice, at);
    e->operands.push_back(std::move(target));
    for (auto& p : parts) e->operands.push_back(std::move(p));
    return sealed(std::move(e));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.args.empty() || !e.kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail_at(cur(), "*args and **kwargs in calls are not supported");
      if (e.args.size() + e.kwargs.size() >= size_t(kMaxCallArguments))
        fail_at(cur(), "the call passes more than " + std::to_string(kMaxCallArguments) + " arguments; the limit is " +
                           std::to_string(kMaxCallArguments));
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == "=") {
        std::string key = advance().text;
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail_at(cur(), "positional argument follows keyword argument");
        e.args.push_back(parse_expr());
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, cur());
    e->operands.push_back(std::move(callee));
    parse_call_args(*e);
    return sealed(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().kind == TokenKind::Name) {
      advance();
      name += "." + advance().text;
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr input, bool pipe_consumed = false) {
    if (!pipe_consumed) advance();  // '|'
    auto e = node(ExprKind::Filter, cur());
    e->name = dotted_name();
    e->operands.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*e);
    return sealed(std::move(e));
  }

  ExprPtr parse_test(ExprPtr input) {
    const Token& at = advance();  // 'is'
    auto e = node(ExprKind::Test, at);
    if (is_name("not")) {
      advance();
      e->negated = true;
    }
    e->name = dotted_name();
    e->operands.push_back(std::move(input));
    const Token& t = cur();
    bool starts_arg = t.kind == TokenKind::Name || t.kind == TokenKind::String || t.kind == TokenKind::Integer ||
                      t.kind == TokenKind::Float || (t.kind == TokenKind::Operator && (t.text == "[" || t.text == "{"));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if (starts_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(t, "tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return sealed(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|"))
        e = parse_filter(std::move(e));
      else if (is_name("is"))
        e = parse_test(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }

  const std::vector<Token>& toks_;
  const std::string& name_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<int> open_lines_;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_all();
}

}  // namespace brioche::tmpl
