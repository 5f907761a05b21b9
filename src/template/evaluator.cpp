#include "template/evaluator.h"

#include "core/error.h"
#include "template/builtins.h"
#include "template/operators.h"

namespace brioche::tmpl {

using ScopePtr = std::shared_ptr<Scope>;

static ScopePtr child_scope(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

void Renderer::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    render_fail("loop iteration limit exceeded (" + std::to_string(limits_.max_loop_iterations) +
                " iterations per render)");
}

void Renderer::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    render_fail("output limit exceeded (" + std::to_string(limits_.max_output_bytes) + " bytes)");
}

void Renderer::append(std::string_view text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

// One level of the evaluator's recursion (a statement or an expression).
struct Renderer::NestingGuard {
  Renderer& r;
  explicit NestingGuard(Renderer& renderer) : r(renderer) {
    if (++r.nesting_ > r.limits_.max_nesting) {
      --r.nesting_;
      render_fail("the template nests blocks, expressions and macro calls more than " +
                  std::to_string(r.limits_.max_nesting) + " deep while rendering; the limit is " +
                  std::to_string(r.limits_.max_nesting));
    }
  }
  ~NestingGuard() { --r.nesting_; }
};

// Namespaces are the only mutable values, so they alone can hold values
// deeper than their own depth() says, or hold themselves. Moving every
// attribute out first leaves each value exactly as deep as its depth()
// (at most kMaxValueDepth), so freeing them afterwards recurses no further,
// and cycles through namespaces are broken rather than leaked.
void Renderer::empty_namespaces() {
  std::vector<std::pair<Value, Value>> attributes;
  for (const Value& ns : namespaces_) {
    auto& entries = ns.namespace_attrs().entries;
    for (auto& entry : entries) attributes.push_back(std::move(entry));
    entries.clear();
  }
  namespaces_.clear();
  attributes.clear();
}

std::string Renderer::render(const Body& body, const Value& context) {
  budget_ = RenderBudget{.max_bytes = limits_.max_output_bytes, .max_work = limits_.max_work_bytes};
  ScopedRenderBudget installed(budget_);
  auto root = std::make_shared<Scope>();
  for (const auto& [k, v] : context.as_dict().entries) root->vars[to_str(k)] = v;
  // Declared after `root`, so it runs before the scopes free their values,
  // on success and on failure alike.
  struct NamespaceSweep {
    Renderer& r;
    ~NamespaceSweep() { r.empty_namespaces(); }
  } sweep{*this};
  std::string out;
  out_ = &out;
  iterations_ = 0;
  call_depth_ = 0;
  nesting_ = 0;
  exec_body(body, root);
  out_ = nullptr;
  return out;
}

std::string Renderer::capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Renderer::Flow Renderer::exec_body(const Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    Flow flow = exec(*s, scope);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const ScopePtr& scope) {
  try {
    NestingGuard nesting(*this);
    switch (s.kind) {
      case StmtKind::Text: append(s.text); return Flow::Normal;
      case StmtKind::Print: append(to_str(eval(*s.expr, scope))); return Flow::Normal;
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec_body(body, scope);
        return exec_body(s.else_body, scope);
      case StmtKind::For: return exec_for(s, scope);
      case StmtKind::Set: exec_set(s, scope, eval(*s.expr, scope)); return Flow::Normal;
      case StmtKind::SetAttr: {
        Value target = lookup(s.targets[0], scope);
        if (!target.is_namespace())
          render_fail("cannot assign attribute '" + s.text + "' on '" + s.targets[0] + "' (" +
                      std::string(target.type_name()) + "); only namespace() objects take attributes");
        Value value = eval(*s.expr, scope);
        target.namespace_attrs().set(Value::string(s.text), std::move(value));
        return Flow::Normal;
      }
      case StmtKind::SetBlock: {
        Value text = Value::string(capture(s.body, child_scope(scope)));
        if (s.filter) text = apply_filter_chain(*s.filter, std::move(text), scope);
        scope->vars[s.targets[0]] = std::move(text);
        return Flow::Normal;
      }
      case StmtKind::Macro: scope->vars[s.text] = make_macro(s, scope); return Flow::Normal;
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::FilterBlock: {
        Value text = Value::string(capture(s.body, child_scope(scope)));
        append(to_str(apply_filter_chain(*s.filter, std::move(text), scope)));
        return Flow::Normal;
      }
      case StmtKind::Generation: return exec_body(s.body, scope);
    }
  } catch (const RenderFailure& f) {
    fail(name_, ":", s.line, ":", s.column, ": ", f.message);
  }
  return Flow::Normal;
}

void Renderer::exec_set(const Stmt& s, const ScopePtr& scope, Value value) {
  if (!s.target_is_tuple) {
    scope->vars[s.targets[0]] = std::move(value);
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() != s.targets.size())
    render_fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(s.targets.size()) +
                " names");
  for (size_t i = 0; i < items.size(); ++i) scope->vars[s.targets[i]] = std::move(items[i]);
}

// Each iteration runs in a fresh scope: Jinja's `set` inside a loop neither
// survives to the next iteration nor leaks out (namespace() is the way out).
Renderer::Flow Renderer::exec_for(const Stmt& s, const ScopePtr& scope) {
  Value iterable = eval(*s.expr, scope);
  if (iterable.is_none()) render_fail("'NoneType' object is not iterable");
  std::vector<Value> items = iterate(iterable);
  if (s.filter) {
    std::vector<Value> kept;
    for (auto& item : items) {
      count_iterations(1);
      auto probe = child_scope(scope);
      exec_set(s, probe, item);
      if (truthy(eval(*s.filter, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, child_scope(scope));
  const int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    count_iterations(1);
    auto iteration = child_scope(scope);
    exec_set(s, iteration, items[size_t(i)]);
    Dict loop;
    loop.entries.reserve(12);
    auto put = [&](const char* key, Value v) { loop.entries.emplace_back(Value::string(key), std::move(v)); };
    put("index", Value::integer(i + 1));
    put("index0", Value::integer(i));
    put("revindex", Value::integer(n - i));
    put("revindex0", Value::integer(n - i - 1));
    put("first", Value::boolean(i == 0));
    put("last", Value::boolean(i == n - 1));
    put("length", Value::integer(n));
    put("depth", Value::integer(1));
    put("depth0", Value::integer(0));
    if (i > 0) put("previtem", items[size_t(i - 1)]);
    if (i + 1 < n) put("nextitem", items[size_t(i + 1)]);
    put("cycle", Value::callable("loop.cycle", [i](Renderer&, CallArgs& args) {
          if (args.positional.empty()) render_fail("loop.cycle() needs at least one value");
          return args.positional[size_t(i) % args.positional.size()];
        }));
    iteration->vars["loop"] = Value::dict(std::move(loop));
    Flow flow = exec_body(s.body, iteration);
    if (flow == Flow::Break) break;
  }
  return Flow::Normal;
}

Value Renderer::make_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* macro = &s;
  // The closure holds its defining scope weakly: the macro lives in that
  // scope, so a strong pointer would be a cycle. Calls happen while it lives.
  std::weak_ptr<Scope> defining = scope;
  return Value::callable(s.text, [macro, defining](Renderer& r, CallArgs& args) -> Value {
    ScopePtr parent = defining.lock();
    if (!parent) render_fail("macro '" + macro->text + "' called after its scope ended");
    if (args.positional.size() > macro->params.size())
      render_fail("macro '" + macro->text + "' takes not more than " + std::to_string(macro->params.size()) +
                  " argument(s), got " + std::to_string(args.positional.size()));
    if (r.call_depth_ >= r.limits_.max_call_depth)
      render_fail("macro call depth limit exceeded (" + std::to_string(r.limits_.max_call_depth) + " nested calls)");
    auto local = child_scope(parent);
    std::vector<bool> given(macro->params.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      local->vars[macro->params[i]] = args.positional[i];
      given[i] = true;
    }
    for (auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < macro->params.size() && macro->params[i] != key) ++i;
      if (i == macro->params.size()) render_fail("macro '" + macro->text + "' has no parameter named '" + key + "'");
      if (given[i]) render_fail("macro '" + macro->text + "' got multiple values for parameter '" + key + "'");
      local->vars[key] = value;
      given[i] = true;
    }
    for (size_t i = 0; i < macro->params.size(); ++i) {
      if (given[i]) continue;
      local->vars[macro->params[i]] = macro->defaults[i]
                                          ? r.eval(*macro->defaults[i], local)
                                          : Value::undefined("parameter '" + macro->params[i] + "' was not provided");
    }
    ++r.call_depth_;
    std::string text;
    try {
      text = r.capture(macro->body, local);
    } catch (...) {
      --r.call_depth_;
      throw;
    }
    --r.call_depth_;
    return Value::string(std::move(text));
  });
}

Value Renderer::apply_filter_chain(const Expr& chain, Value input, const ScopePtr& scope) {
  if (chain.kind != ExprKind::Filter) return input;  // the chain's root stands for `input`
  Value inner = apply_filter_chain(*chain.operands[0], std::move(input), scope);
  CallArgs args = eval_args(chain, scope);
  return call_filter(chain.name, inner, args);
}

// Filters called by name recurse without an expression per level
// (`x | map('map', 'map', ...)`), so each call is a level of nesting.
Value Renderer::call_filter(std::string_view name, const Value& input, CallArgs& args) {
  NestingGuard nesting(*this);
  FilterFn fn = find_filter(name);
  if (!fn) render_fail("no filter named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

bool Renderer::call_test(std::string_view name, const Value& input, CallArgs& args) {
  NestingGuard nesting(*this);
  TestFn fn = find_test(name);
  if (!fn) render_fail("no test named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

Value Renderer::lookup(const std::string& name, const ScopePtr& scope) const {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  Value global = find_global(name);
  if (!global.is_undefined()) return global;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Renderer::eval_args(const Expr& e, const ScopePtr& scope) {
  CallArgs args;
  args.positional.reserve(e.args.size());
  for (const auto& a : e.args) args.positional.push_back(eval(*a, scope));
  for (const auto& [key, a] : e.kwargs) args.keyword.emplace_back(key, eval(*a, scope));
  return args;
}

// Failures deep inside an expression report the innermost node's location.
Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
  try {
    NestingGuard nesting(*this);
    return eval_inner(e, scope);
  } catch (const RenderFailure& f) {
    fail(name_, ":", e.line, ":", e.column, ": ", f.message);
  }
}

static std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_int() && !v.is_bool())
    render_fail("slice indices must be integers or None, not " + std::string(v.type_name()));
  return v.as_int();
}

Value Renderer::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: return lookup(e.name, scope);
    case ExprKind::GetAttr: return get_attribute(eval(*e.operands[0], scope), e.name);
    case ExprKind::GetItem: return get_item(eval(*e.operands[0], scope), eval(*e.operands[1], scope));
    case ExprKind::Slice: {
      Value target = eval(*e.operands[0], scope);
      std::optional<int64_t> bounds[3];
      for (int i = 0; i < 3; ++i)
        if (e.operands[size_t(i) + 1]) bounds[i] = slice_bound(eval(*e.operands[size_t(i) + 1], scope));
      return slice(target, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::Call: {
      Value callee = eval(*e.operands[0], scope);
      require_defined(callee);
      const Callable& fn = callee.as_callable();
      CallArgs args = eval_args(e, scope);
      return fn.call(*this, args);
    }
    case ExprKind::Filter: {
      Value input = eval(*e.operands[0], scope);
      CallArgs args = eval_args(e, scope);
      return call_filter(e.name, input, args);
    }
    case ExprKind::Test: {
      Value input = eval(*e.operands[0], scope);
      CallArgs args = eval_args(e, scope);
      return Value::boolean(call_test(e.name, input, args) != e.negated);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.operands[0], scope);
      if (e.name == "not") return Value::boolean(!truthy(v));
      require_defined(v);
      if (!v.is_number())
        render_fail("bad operand type for unary " + e.name + ": '" + std::string(v.type_name()) + "'");
      if (e.name == "+") return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::floating(-v.as_number());
      if (v.as_int() == INT64_MIN) render_fail("integer overflow (values beyond 64 bits are not supported)");
      return Value::integer(-v.as_int());
    }
    case ExprKind::Binary:
      return binary_op(e.name, eval(*e.operands[0], scope), eval(*e.operands[1], scope), limits_.max_output_bytes);
    case ExprKind::And: {
      Value left = eval(*e.operands[0], scope);
      return truthy(left) ? eval(*e.operands[1], scope) : left;
    }
    case ExprKind::Or: {
      Value left = eval(*e.operands[0], scope);
      return truthy(left) ? left : eval(*e.operands[1], scope);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.operands[0], scope);
      for (size_t i = 0; i < e.compare_ops.size(); ++i) {
        Value right = eval(*e.operands[i + 1], scope);
        const std::string& op = e.compare_ops[i];
        bool ok;
        if (op == "==")
          ok = equal(left, right);
        else if (op == "!=")
          ok = !equal(left, right);
        else if (op == "in")
          ok = contains(right, left);
        else if (op == "not in")
          ok = !contains(right, left);
        else {
          require_defined(left);
          require_defined(right);
          int c = compare(left, right, op);
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::Condition:
      if (truthy(eval(*e.operands[0], scope))) return eval(*e.operands[1], scope);
      if (e.operands[2]) return eval(*e.operands[2], scope);
      return Value::undefined("the condition was false and the expression has no else");
    case ExprKind::ListLit:
    case ExprKind::TupleLit: {
      std::vector<Value> items;
      items.reserve(e.operands.size());
      for (const auto& x : e.operands) items.push_back(eval(*x, scope));
      return e.kind == ExprKind::ListLit ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::DictLit: {
      Dict d;
      for (size_t i = 0; i + 1 < e.operands.size(); i += 2)
        d.set(eval(*e.operands[i], scope), eval(*e.operands[i + 1], scope));
      return Value::dict(std::move(d));
    }
  }
  render_fail("unknown expression");
}

// ---- validation ---------------------------------------------------------------

namespace {
struct Validator {
  const std::string& name;
  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::Filter && !find_filter(e->name))
      fail(name, ":", e->line, ":", e->column, ": no filter named '", e->name, "'");
    if (e->kind == ExprKind::Test && !find_test(e->name))
      fail(name, ":", e->line, ":", e->column, ": no test named '", e->name, "'");
    for (const auto& x : e->operands) expr(x.get());
    for (const auto& x : e->args) expr(x.get());
    for (const auto& [k, x] : e->kwargs) expr(x.get());
  }
  void body(const Body& b, bool in_loop) {
    for (const auto& s : b) stmt(*s, in_loop);
  }
  void stmt(const Stmt& s, bool in_loop) {
    if ((s.kind == StmtKind::Break || s.kind == StmtKind::Continue) && !in_loop)
      fail(name, ":", s.line, ":", s.column, ": '", s.kind == StmtKind::Break ? "break" : "continue",
           "' outside a for loop");
    expr(s.expr.get());
    expr(s.filter.get());
    for (const auto& [cond, b] : s.branches) {
      expr(cond.get());
      body(b, in_loop);
    }
    for (const auto& d : s.defaults) expr(d.get());
    bool loop_body = s.kind == StmtKind::For || (in_loop && s.kind != StmtKind::Macro);
    body(s.body, loop_body);
    body(s.else_body, in_loop && s.kind != StmtKind::Macro);
  }
};
}  // namespace

void validate_template(const Body& body, const std::string& template_name) {
  Validator{template_name}.body(body, false);
}

}  // namespace brioche::tmpl
