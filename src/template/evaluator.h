// Renders a parsed template: statements write text, expressions evaluate to
// Values with Python/Jinja semantics. Limits turn hostile templates (runaway
// loops, unbounded recursion, exploding output) into errors, not crashes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "template/ast.h"
#include "template/value.h"

namespace brioche::tmpl {

struct RenderLimits {
  size_t max_output_bytes = size_t{32} << 20;  // any string or list a render builds, the output included
  int64_t max_loop_iterations = 1'000'000;     // summed over all loops of one render; also caps range()
  int max_call_depth = 100;                    // nested macro calls
  // Statements and expressions being evaluated inside each other, macro
  // bodies included: the evaluator's recursion. 1000 levels use well under
  // 1 MiB of stack (checked by tests/template/template_limits_test.cpp).
  int max_nesting = 1000;
  // Bytes of strings and lists built, copied, compared or searched by one
  // render: bounds the time of quadratic patterns (`ns.s = ns.s ~ x` in a
  // long loop, `x in big_list` in a loop), about a second at most.
  int64_t max_work_bytes = int64_t{1} << 30;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};

class Renderer {
 public:
  Renderer(const std::string& template_name, const RenderLimits& limits) : name_(template_name), limits_(limits) {}

  // context: a Dict of top-level variables.
  std::string render(const Body& body, const Value& context);

  const RenderLimits& limits() const { return limits_; }
  void count_iterations(int64_t n);
  void check_size(size_t bytes) const;  // fails past max_output_bytes
  // namespace() registers what it makes: the render empties them all before
  // freeing anything (see render()).
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

  // Used by filters that take other filters/tests by name: map('upper'), select('odd').
  Value call_filter(std::string_view name, const Value& input, CallArgs& args);
  bool call_test(std::string_view name, const Value& input, CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };

  struct NestingGuard;
  void empty_namespaces();

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope, Value value);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  Value apply_filter_chain(const Expr& chain, Value input, const std::shared_ptr<Scope>& scope);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value lookup(const std::string& name, const std::shared_ptr<Scope>& scope) const;
  CallArgs eval_args(const Expr& e, const std::shared_ptr<Scope>& scope);
  void append(std::string_view text);

  const std::string& name_;
  RenderLimits limits_;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;
  RenderBudget budget_;
  std::vector<Value> namespaces_;
};

// Checks at parse time what Jinja checks at compile time: every filter and
// test name exists, break/continue sit inside a loop. Fails with the location.
void validate_template(const Body& body, const std::string& template_name);

}  // namespace brioche::tmpl
