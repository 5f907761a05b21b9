#include "grammar/rule_dedup.h"

#include <unordered_map>
#include <vector>

#include "grammar/hash128.h"

namespace brioche::grammar {
namespace {

struct Key128 {
  uint64_t a = 0, b = 0;
  bool operator==(const Key128&) const = default;
};
struct Key128Hash {
  size_t operator()(const Key128& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull)); }
};

// Per expression: a 128-bit hash of its tree with every rule reference as
// one marker value (children precede their parents in the arena).
std::vector<Key128> shape_hashes(const Grammar& g) {
  std::vector<Key128> shape(g.exprs.size());
  for (size_t i = 0; i < g.exprs.size(); ++i) {
    const Expr& e = g.exprs[i];
    Hasher128 h;
    h.add(static_cast<uint64_t>(e.kind));
    switch (e.kind) {
      case Expr::Kind::kEmpty:
      case Expr::Kind::kRuleRef: break;
      case Expr::Kind::kBytes:
        h.add(e.bytes.size());
        for (unsigned char c : e.bytes) h.add(c);
        break;
      case Expr::Kind::kCharClass:
        h.add(e.negated ? 1 : 0);
        h.add(e.ranges.size());
        for (const auto& [lo, hi] : e.ranges) h.add((static_cast<uint64_t>(lo) << 32) | hi);
        break;
      case Expr::Kind::kSequence:
      case Expr::Kind::kChoice:
      case Expr::Kind::kRepeat:
      case Expr::Kind::kLengthBound:
        h.add((static_cast<uint64_t>(static_cast<uint32_t>(e.min_repeat)) << 32) | static_cast<uint32_t>(e.max_repeat));
        h.add(e.children.size());
        for (int32_t c : e.children) {
          h.add(shape[c].a);
          h.add(shape[c].b);
        }
        break;
    }
    shape[i] = Key128{h.a, h.b};
  }
  return shape;
}

}  // namespace

Grammar merge_equal_rules(const Grammar& g) {
  const int32_t num_rules = static_cast<int32_t>(g.rules.size());
  const std::vector<Key128> shape = shape_hashes(g);
  // Per rule: its shape (body, lookahead, item flag) and the rules it
  // references, in the order of a depth-first walk of its trees (the
  // marked positions of the shape, in order). A tree is walked as a tree: an
  // arena whose rules share subtrees so much that the walks pass 4x the
  // arena is left as it is (no converter builds one).
  std::vector<Key128> rule_shape(num_rules);
  std::vector<int32_t> ref_begin(num_rules + 1, 0), refs;
  std::vector<int32_t> stack;
  const size_t max_visits = 4 * g.exprs.size() + 1024;
  size_t visits = 0;
  for (int32_t r = 0; r < num_rules; ++r) {
    const Rule& rule = g.rules[r];
    Hasher128 h;
    h.add(rule.body >= 0 ? shape[rule.body].a : 0);
    h.add(rule.body >= 0 ? shape[rule.body].b : 0);
    h.add(rule.lookahead >= 0 ? shape[rule.lookahead].a : 1);
    h.add(rule.lookahead >= 0 ? shape[rule.lookahead].b : 1);
    // An item rule is its own class: its index makes its shape unique.
    h.add(rule.unique_item ? 0x10000000000ull + static_cast<uint64_t>(r) : 0);
    rule_shape[r] = Key128{h.a, h.b};
    for (int32_t root : {rule.body, rule.lookahead}) {
      if (root < 0) continue;
      stack.assign(1, root);
      while (!stack.empty()) {
        if (++visits > max_visits) return g;
        const Expr& e = g.exprs[stack.back()];
        stack.pop_back();
        if (e.kind == Expr::Kind::kRuleRef) refs.push_back(e.rule);
        for (auto it = e.children.rbegin(); it != e.children.rend(); ++it) stack.push_back(*it);
      }
    }
    ref_begin[r + 1] = static_cast<int32_t>(refs.size());
  }
  // Moore refinement: a rule's class is its shape, its previous class and
  // the previous classes of its references, until no class splits. A round
  // splits at least one class, so a chain of n rules takes n rounds: past
  // kMaxRounds the grammar is left as it is (a partial partition could
  // merge rules that differ), so a hostile chain costs rounds x rules, not
  // rules squared (20,000 rules: 33 s before this bound).
  constexpr int kMaxRounds = 256;
  std::vector<int32_t> cls(num_rules, 0), next(num_rules);
  int32_t num_classes = 1;
  std::unordered_map<Key128, int32_t, Key128Hash> ids;
  for (int round = 0;; ++round) {
    if (round == kMaxRounds) return g;
    ids.clear();
    for (int32_t r = 0; r < num_rules; ++r) {
      Hasher128 h;
      h.add(rule_shape[r].a);
      h.add(rule_shape[r].b);
      h.add(static_cast<uint64_t>(cls[r]));
      for (int32_t k = ref_begin[r]; k < ref_begin[r + 1]; ++k) h.add(static_cast<uint64_t>(cls[refs[k]]));
      next[r] = ids.emplace(Key128{h.a, h.b}, static_cast<int32_t>(ids.size())).first->second;
    }
    const int32_t count = static_cast<int32_t>(ids.size());
    cls.swap(next);
    if (count == num_classes) break;
    num_classes = count;
  }
  if (num_classes == num_rules) return g;
  std::vector<int32_t> first_of(num_classes, -1);
  for (int32_t r = 0; r < num_rules; ++r)
    if (first_of[cls[r]] < 0) first_of[cls[r]] = r;
  Grammar out = g;
  for (Expr& e : out.exprs)
    if (e.kind == Expr::Kind::kRuleRef) e.rule = first_of[cls[e.rule]];
  return out;
}

}  // namespace brioche::grammar
