// Syntax tree of a parsed template: expressions and statements, each with the
// source line and column that errors report.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace brioche::tmpl {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Literal,  // literal
  Name,     // name
  GetAttr,  // operands[0].name
  GetItem,  // operands[0][operands[1]]
  Slice,    // operands[0][a:b:c]; operands[1..3] may be null
  Call,     // operands[0](args, kwargs)
  Filter,   // operands[0] | name(args, kwargs)
  Test,     // operands[0] is [not] name(args)
  Unary,    // op in {"-", "+", "not"}: op operands[0]
  Binary,   // operands[0] op operands[1]; op in + - * / // % ** ~
  And,
  Or,
  Compare,    // operands[0] ops[0] operands[1] ops[1] operands[2] ... (chained)
  Condition,  // operands[1] if operands[0] else operands[2] (else may be null)
  ListLit,
  TupleLit,
  DictLit,  // operands: key, value, key, value, ...
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  int height = 1;    // longest path to a leaf, set by the parser (bounded by kMaxExpressionDepth)
  std::string name;  // Name, GetAttr, Filter, Test, Unary/Binary op
  Value literal;
  bool negated = false;  // Test: `is not`
  std::vector<ExprPtr> operands;
  std::vector<std::string> compare_ops;  // Compare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  std::vector<ExprPtr> args;             // Call, Filter, Test
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class StmtKind {
  Text,      // text
  Print,     // {{ expr }}
  If,        // branches: (cond, body)...; else_body
  For,       // targets in expr [if filter]: body [else else_body]
  Set,       // targets = expr
  SetAttr,   // target.attr = expr (namespace)
  SetBlock,  // {% set target | filters %}body{% endset %}
  Macro,     // name(params=defaults): body
  Break,
  Continue,
  FilterBlock,  // {% filter f %}body{% endfilter %}
  Generation,   // transformers' {% generation %}: renders its body
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;  // Text; Macro name; SetAttr attribute
  ExprPtr expr;      // Print, For iterable, Set/SetAttr value
  ExprPtr filter;  // For: `if` condition; SetBlock/FilterBlock: filter chain whose root Name stands for the block text
  std::vector<std::string> targets;                // For, Set, SetBlock, SetAttr (namespace name)
  bool target_is_tuple = false;                    // `for a, b in` / `set a, b =`
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;
  Body else_body;
  std::vector<std::string> params;  // Macro
  std::vector<ExprPtr> defaults;    // Macro: one per param, null when none
};

}  // namespace brioche::tmpl
