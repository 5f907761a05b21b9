// Lowering: IR expression -> Thompson NFA (with epsilons) per rule ->
// epsilon removal -> merge of states with identical futures -> global tables.
// Classes become byte sequences in utf8_ranges.cpp, the inlining plan is
// rule_plan.cpp, and the keys of shared masks (structure and forward
// hashes, walk classes) are automaton_equivalence.cpp.
#include "grammar/automaton.h"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "grammar/rule_plan.h"
#include "grammar/utf8_ranges.h"

namespace brioche::grammar {
namespace {

// The end of a round of a counted repetition (local state ids).
struct LocalCounter {
  int32_t loop_target = -1, exit_target = -1;
  int32_t rounds = 0;
  bool operator==(const LocalCounter&) const = default;
};

struct LocalState {
  std::vector<int32_t> eps;
  std::vector<ByteEdge> bytes;
  std::vector<RuleEdge> rules;
  int32_t loop = -1;     // the counted repetition whose body holds it (index in its rule)
  LocalCounter counter;  // loop_target >= 0: a round ends here
};

struct Fragment {
  int32_t start, end;
};

// Most states (before merging) the layers of one length bound %{m,n} may take.
constexpr int64_t kMaxLengthBoundStates = 150000;
// Past this many states (before merging) with every item written out in
// each layer, a bound's large items become shared item-rule calls: each
// layer is then a few states an item instead of its UTF-8 states, and the
// masks stay the same (the corpus' digests: equal). 117's ARN patterns
// under maxLength 1600: 411k -> 284k automaton states.
constexpr int64_t kShareItemsFromStates = 16384;

// Inside a length bound, an item (a class, or a choice of classes and
// literals: one JSON character with its escapes) that takes more states
// than this is read through a call of a shared item rule
// (Automaton::first_item_rule) instead of holding its states in every
// layer: Unicode \w is ~700 ranges, 650-2,900 states, a JSON `.` with its
// 34 escapes ~200, and a bound of 256 has hundreds of layers.
constexpr int32_t kMinSharedItemStates = 24;

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// The build's work counter: every unit is added here and the budget is
// checked at once, so a grammar whose lowering is superlinear (long chains
// of optional items, wide alternatives merging) stops at the same point on
// any machine.
// Units are weighted to cost about what a mask-walk unit costs (measured:
// making an NFA state allocates; a closure step or comparison reads a few
// edges), so one budget covers both phases.
struct BuildWork {
  static constexpr uint64_t kPerState = 64, kPerStep = 4;
  uint64_t used = 0;
  uint64_t limit = UINT64_MAX;
  void add_state() { add(kPerState); }
  void add_steps(uint64_t steps) { add(kPerStep * steps); }
  void add(uint64_t units) {
    used += units;
    if (used > limit) [[unlikely]]
      fail("grammar compile exceeded its work budget of ", limit, " units while building the automaton (", used,
           " spent); simplify the grammar or raise CompileLimits::max_work");
  }
};

class RuleBuilder {
 public:
  // Item rules get ids from `first_item_rule` on (after every grammar and
  // lookahead rule).
  RuleBuilder(const Grammar& g, const AutomatonLimits& limits, const std::vector<char>& inlined, BuildWork& work,
              int32_t first_item_rule)
      : g_(g), limits_(limits), inlined_(inlined), work_(work), first_item_rule_(first_item_rule) {}

  // The expression of each item rule made so far, by rule id -
  // first_item_rule (build() of it is the rule's body).
  const std::vector<int32_t>& item_rules() const { return item_rules_; }
  // The body of the item rule of expression id: its characters of two or
  // more bytes (call_item reads the one-byte ones).
  Fragment build_item(int32_t id) {
    wide_only_ = true;
    const Fragment f = build(id);
    wide_only_ = false;
    return f;
  }

  // [num_states()] in use; entries past it are kept for their buffers, so
  // one builder reused for every rule allocates little.
  std::vector<LocalState> states;
  int32_t num_states() const { return used_; }
  void reset() {
    used_ = 0;
    num_loops_ = 0;
    current_loop_ = -1;
  }

  int32_t new_state() {
    work_.add_state();
    BRIOCHE_CHECK(static_cast<size_t>(used_) < limits_.max_states, "grammar too large: more than ", limits_.max_states,
                  " automaton states (size budget); reduce repetition counts or schema size");
    if (static_cast<size_t>(used_) == states.size()) {
      states.emplace_back();
    } else {
      LocalState& st = states[used_];
      st.eps.clear();
      st.bytes.clear();
      st.rules.clear();
      st.counter = LocalCounter{};
    }
    states[used_].loop = current_loop_;
    return used_++;
  }

  Fragment build(int32_t id) {
    const Expr& e = g_.exprs[id];
    switch (e.kind) {
      case Expr::Kind::kEmpty: {
        int32_t s = new_state();
        return {s, s};
      }
      case Expr::Kind::kBytes: {
        if (wide_only_ && e.bytes.size() == 1 && static_cast<uint8_t>(e.bytes[0]) < 0x80) {
          const int32_t s = new_state(), t = new_state();  // read at the call site
          return {s, t};
        }
        int32_t s = new_state(), cur = s;
        for (unsigned char c : e.bytes) {
          int32_t n = new_state();
          states[cur].bytes.push_back({c, c, n});
          cur = n;
        }
        if (item_ends_ && !e.bytes.empty()) item_ends_->push_back(cur);
        return {s, cur};
      }
      case Expr::Kind::kCharClass: {
        if (share_items_ && item_ends_ && item_rule(id) >= 0) return call_item(id);
        int32_t s = new_state(), t = new_state();
        read_class(id, s, t);
        if (item_ends_) item_ends_->push_back(t);
        return {s, t};
      }
      case Expr::Kind::kRuleRef: {
        if (inlined_[e.rule]) return build(g_.rules[e.rule].body);
        if (item_ends_)
          fail("grammar: a length bound %{m,n} counts classes and literals; found a call of rule '",
               g_.rules[e.rule].name, "' inside it");
        int32_t s = new_state(), t = new_state();
        states[s].rules.push_back({e.rule, t});
        return {s, t};
      }
      case Expr::Kind::kSequence: {
        Fragment f = build(e.children[0]);
        for (size_t i = 1; i < e.children.size(); ++i) {
          Fragment n = build(e.children[i]);
          states[f.end].eps.push_back(n.start);
          f.end = n.end;
        }
        return f;
      }
      case Expr::Kind::kChoice: {
        if (share_items_ && item_ends_ && item_rule(id) >= 0) return call_item(id);
        int32_t s = new_state(), t = new_state();
        for (int32_t c : e.children) {
          Fragment f = build(c);
          states[s].eps.push_back(f.start);
          states[f.end].eps.push_back(t);
        }
        return {s, t};
      }
      case Expr::Kind::kRepeat: {
        int32_t child = e.children[0];
        // A part of more than `from` copies is counted (CounterEdge), all
        // but its last `window` copies; those are written out, so that
        // tokens near the bound see the states they will meet.
        const int64_t window = limits_.counter_window;
        const int64_t from = std::max<int64_t>(2 * window, limits_.counter_from);
        const bool can_count = window > 0 && current_loop_ < 0 && !item_ends_ && !can_be_empty(child, 0);
        int32_t s = new_state(), cur = s;
        int64_t required = e.min_repeat;
        if (can_count && required > from) {
          cur = counted(child, cur, required - window, -1);
          required = window;
        }
        for (int64_t i = 0; i < required; ++i) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          cur = f.end;
        }
        if (e.max_repeat < 0) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          states[f.end].eps.push_back(cur);
          return {s, cur};
        }
        int32_t t = new_state();
        int64_t optional = static_cast<int64_t>(e.max_repeat) - e.min_repeat;
        if (can_count && optional > from) {
          cur = counted(child, cur, optional - window, t);
          optional = window;
        }
        for (int64_t i = 0; i < optional; ++i) {
          Fragment f = build(child);
          states[cur].eps.push_back(f.start);
          states[cur].eps.push_back(t);
          cur = f.end;
        }
        states[cur].eps.push_back(t);
        return {s, t};
      }
      case Expr::Kind::kLengthBound: return length_bounded(e);
    }
    fail("grammar: unknown expression kind");
  }

 private:
  // `rounds` rounds of `child` after `before`, counted: a head state that
  // starts a round (and may leave to `leave` when >= 0: an optional part),
  // the body once, and a counter edge at the body's end. Returns the state
  // the bound leads to (where the written-out copies start).
  int32_t counted(int32_t child, int32_t before, int64_t rounds, int32_t leave) {
    const int32_t outer = current_loop_;
    BRIOCHE_CHECK(num_loops_ < 32767, "grammar: more than 32767 counted repetitions in one rule");
    current_loop_ = num_loops_++;
    const int32_t head = new_state();
    const Fragment body = build(child);
    current_loop_ = outer;
    const int32_t after = new_state();
    states[before].eps.push_back(head);
    states[head].eps.push_back(body.start);
    if (leave >= 0) states[head].eps.push_back(leave);
    states[body.end].counter = LocalCounter{head, after, static_cast<int32_t>(rounds)};
    return after;
  }

  // The class of expression id, normalised once per grammar (a Unicode
  // class is ~700 ranges to sort, and a repetition or a length bound builds
  // it once per copy or layer).
  const CodepointRanges& normalized(int32_t id) {
    auto it = normalized_.find(id);
    if (it == normalized_.end()) it = normalized_.emplace(id, normalize_class(g_.exprs[id])).first;
    return it->second;
  }

  // Byte edges from fresh states s to t reading one character of class
  // expression id (its characters of two or more bytes in an item rule:
  // wide_only_). The first build of a class is recorded (its new states in
  // creation order and every edge, states numbered from s = 0, t = 1) and
  // later ones replay it: `\w{1,255}` builds \w's ~310 UTF-8 states 254
  // times. A replay makes the same states and edges in the same order.
  void read_class(int32_t id, int32_t s, int32_t t) {
    ClassTemplate& tpl = class_templates_[2 * static_cast<int64_t>(id) + (wide_only_ ? 1 : 0)];
    if (!tpl.recorded) {
      const int32_t first_new = used_;
      const CodepointRanges& ranges = normalized(id);
      read_ranges(s, t, wide_only_ ? clipped(ranges, 0x80, 0x10FFFF) : ranges);
      auto local = [&](int32_t g) { return g == s ? 0 : g == t ? 1 : g - first_new + 2; };
      tpl.new_states = used_ - first_new;
      auto record = [&](int32_t g) {
        for (const ByteEdge& b : states[g].bytes) tpl.edges.push_back({local(g), b.lo, b.hi, local(b.target)});
      };
      record(s);
      for (int32_t g = first_new; g < used_; ++g) record(g);
      tpl.recorded = true;
      return;
    }
    const int32_t first_new = used_;
    for (int32_t i = 0; i < tpl.new_states; ++i) new_state();
    auto global = [&](int32_t l) { return l == 0 ? s : l == 1 ? t : first_new + l - 2; };
    for (const ClassTemplate::Edge& e : tpl.edges) states[global(e.from)].bytes.push_back({e.lo, e.hi, global(e.to)});
  }
  struct ClassTemplate {
    struct Edge {
      int32_t from;
      uint8_t lo, hi;
      int32_t to;
    };
    bool recorded = false;
    int32_t new_states = 0;
    std::vector<Edge> edges;  // per state in local order, each state's edges in order
  };

  // Byte edges from s to t reading one character of `ranges` (UTF-8
  // sequences sharing their prefixes: a small trie keyed by range).
  void read_ranges(int32_t s, int32_t t, const CodepointRanges& ranges) {
    std::map<std::pair<int32_t, std::pair<uint8_t, uint8_t>>, int32_t> trie;
    for (auto [lo, hi] : ranges) {
      for (const ByteSeq& seq : utf8_sequences(lo, hi)) {
        int32_t cur = s;
        for (size_t i = 0; i < seq.size(); ++i) {
          if (i + 1 == seq.size()) {
            states[cur].bytes.push_back({seq[i].first, seq[i].second, t});
          } else {
            auto key = std::make_pair(cur, seq[i]);
            auto it = trie.find(key);
            if (it == trie.end()) {
              int32_t n = new_state();
              states[cur].bytes.push_back({seq[i].first, seq[i].second, n});
              it = trie.emplace(key, n).first;
            }
            cur = it->second;
          }
        }
      }
    }
  }

  // Inside a length bound: the item rule that reads expression `id` (one
  // item: a class, or a choice of classes and non-empty literals), or -1
  // when it is not one item or small enough to write out in every layer.
  // Decided once per expression (its states are built once to count them).
  int32_t item_rule(int32_t id) {
    auto it = item_rule_of_.find(id);
    if (it != item_rule_of_.end()) return it->second;
    auto one_item = [&](int32_t c) {
      const Expr& x = g_.exprs[c];
      return x.kind == Expr::Kind::kCharClass || (x.kind == Expr::Kind::kBytes && !x.bytes.empty());
    };
    const Expr& e = g_.exprs[id];
    bool single = e.kind == Expr::Kind::kCharClass;
    if (e.kind == Expr::Kind::kChoice) single = std::all_of(e.children.begin(), e.children.end(), one_item);
    int32_t rule = -1;
    if (single) {
      std::vector<int32_t>* saved = item_ends_;
      const int32_t mark = used_;
      item_ends_ = nullptr;
      build(id);
      item_ends_ = saved;
      if (used_ - mark > kMinSharedItemStates) {
        rule = first_item_rule_ + static_cast<int32_t>(item_rules_.size());
        item_rules_.push_back(id);
      }
      used_ = mark;  // the states built to count them are dropped
    }
    item_rule_of_.emplace(id, rule);
    return rule;
  }
  // A call of expression id's item rule, returning to the item's end. Its
  // one-byte characters are read here (the rule reads the rest: build_item),
  // so the call site reads bytes: its mask covers the tokens that start in
  // the call, and the mask compiler leaves the rule's start state out.
  Fragment call_item(int32_t id) {
    const int32_t s = new_state(), t = new_state();
    const Expr& e = g_.exprs[id];
    CodepointRanges ascii;
    auto add = [&](int32_t x_id) {
      const Expr& x = g_.exprs[x_id];
      if (x.kind == Expr::Kind::kCharClass)
        for (auto r : clipped(normalized(x_id), 0, 0x7F)) ascii.push_back(r);
      if (x.kind == Expr::Kind::kBytes && x.bytes.size() == 1 && static_cast<uint8_t>(x.bytes[0]) < 0x80)
        ascii.push_back({static_cast<uint8_t>(x.bytes[0]), static_cast<uint8_t>(x.bytes[0])});
    };
    if (e.kind == Expr::Kind::kChoice)
      for (int32_t c : e.children) add(c);
    else
      add(id);
    for (auto [lo, hi] : ascii) states[s].bytes.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), t});
    states[s].rules.push_back({item_rule_of_.at(id), t});
    item_ends_->push_back(t);
    return {s, t};
  }
  static CodepointRanges clipped(const CodepointRanges& ranges, uint32_t lo, uint32_t hi) {
    CodepointRanges out;
    for (auto [a, b] : ranges)
      if (b >= lo && a <= hi) out.push_back({std::max(a, lo), std::min(b, hi)});
    return out;
  }

  // Whether `id` may match the empty string (conservative: any rule call
  // that stays a call counts as maybe empty). A counted body must read a
  // byte per round, else its counter could go round without input.
  bool can_be_empty(int32_t id, int depth) const {
    const Expr& e = g_.exprs[id];
    if (depth > 64) return true;
    switch (e.kind) {
      case Expr::Kind::kEmpty: return true;
      case Expr::Kind::kBytes: return e.bytes.empty();
      case Expr::Kind::kCharClass: return false;
      case Expr::Kind::kRuleRef: return !inlined_[e.rule] || can_be_empty(g_.rules[e.rule].body, depth + 1);
      case Expr::Kind::kRepeat:
      case Expr::Kind::kLengthBound: return e.min_repeat == 0 || can_be_empty(e.children[0], depth + 1);
      case Expr::Kind::kSequence:
        for (int32_t c : e.children)
          if (!can_be_empty(c, depth + 1)) return false;
        return true;
      case Expr::Kind::kChoice:
        for (int32_t c : e.children)
          if (can_be_empty(c, depth + 1)) return true;
        return false;
    }
    return true;
  }

  // kLengthBound: the child's matches of lo..hi items, the product of its
  // automaton and a count of items read. The child is built once per count
  // (a layer; inner repetitions unrolled, so every layer has the same
  // states), and the last byte of each item (a class or a literal) leads
  // into the next layer's copy of the state after that item; the last
  // layer reads no item, and states that can no longer end are dropped.
  // With a window W (counted()) and hi - lo well above it, the counts
  // lo .. hi - W - R - 1 are one layer read as a counted repetition (R: the
  // most items a state of the child needs to end): each item's end there
  // carries a counter edge (all in one loop: the count is kept while the
  // stack moves between its states) back into that layer, or at the bound
  // into W + R + 1 written-out layers. Masks ignore counts and stay exact:
  // a token reads at most W items, so it cannot tell the counted layer from
  // the written-out ones, and whatever state it ends in can still end.
  // Not inlined into build(): that recursion runs once per expression level
  // (up to kMaxExpressionDepth) and must keep a small frame.
  [[gnu::noinline]] Fragment length_bounded(const Expr& e) {
    if (item_ends_) fail("grammar: a length bound %{m,n} inside another one");
    const int64_t lo = e.min_repeat, hi = e.max_repeat;
    struct Layer {
      Fragment f;
      std::vector<int32_t> ends;  // per item, the state after it
      int32_t first = 0, last = 0;
    };
    auto build_layer = [&] {
      Layer l;
      l.first = used_;
      item_ends_ = &l.ends;
      l.f = build(e.children[0]);
      item_ends_ = nullptr;
      l.last = used_;
      return l;
    };
    // A probe layer (dropped again) gives the size of one and the most items
    // any of its states needs to reach the end (`reach`).
    Layer probe = build_layer();
    int32_t layer_states = probe.last - probe.first;
    int64_t reach = items_to_end(probe);
    used_ = probe.first;
    // Counted when far apart: the written-out layers then cover a token's
    // items (W) and, after them, the items any state still needs to end
    // (reach): from a counted state a token can only reach states that can
    // still end, as the masks (which ignore counts) assume.
    const int64_t window = limits_.counter_window;
    auto is_counted = [&] {
      return window > 0 && current_loop_ < 0 && hi >= 0 &&
             hi - lo > std::max<int64_t>(2 * window, limits_.counter_from) + reach;
    };
    // Layers 0..before-1 hold the counts 0..before-1; then the counted
    // layer (counts lo .. hi - written - 1) and the written-out ones
    // (hi - written .. hi).
    auto layers_needed = [&] {
      const int64_t before = is_counted() ? lo : hi >= 0 ? hi + 1 : lo + 1;
      const int64_t after = is_counted() ? window + reach + 1 : 0;
      return before + after + 1;
    };
    // Its own budget, below the automaton's: the mask compiler walks every
    // layer, and a large class (Unicode \\w: ~700 ranges) in a pattern of
    // hundreds of layers made compiles of seconds.
    const int64_t budget = std::min<int64_t>(kMaxLengthBoundStates, static_cast<int64_t>(limits_.max_states));
    if (static_cast<int64_t>(layer_states) * layers_needed() >= std::min(budget, kShareItemsFromStates)) {
      // Too large with every item written out in each layer: large items
      // become calls of shared item rules (item_rule()), a few states a
      // layer. Only then: a mask whose stacks stand inside an item rule
      // leaves the tokens that end the item to the matcher (uncertain).
      share_items_ = true;
      probe = build_layer();
      layer_states = probe.last - probe.first;
      reach = items_to_end(probe);
      used_ = probe.first;
    }
    const bool counted_layer = is_counted();
    const int64_t written = window + reach;
    const int64_t before = counted_layer ? lo : hi >= 0 ? hi + 1 : lo + 1;
    const int64_t after = counted_layer ? written + 1 : 0;
    const int64_t total = static_cast<int64_t>(layer_states) * layers_needed();
    if (total >= budget) share_items_ = false;
    BRIOCHE_CHECK(total < budget, "grammar too large: a length bound %{", lo, ",", hi, "} over ", layer_states,
                  " states needs about ", total, " automaton states (its budget: ", budget, ")");
    std::vector<Layer> layers;
    auto add_layer = [&] {
      layers.push_back(build_layer());
      BRIOCHE_CHECK(
          layers.back().last - layers.back().first == layer_states && layers.back().ends.size() == probe.ends.size(),
          "grammar: layers of a length bound differ");
    };
    const int32_t loop = counted_layer ? num_loops_++ : -1;
    for (int64_t k = 0; k < before; ++k) add_layer();
    if (counted_layer) {
      current_loop_ = loop;
      add_layer();
      current_loop_ = -1;
    }
    for (int64_t k = 0; k < after; ++k) add_layer();
    const int32_t far = counted_layer ? static_cast<int32_t>(before) : -1;
    const int32_t n = static_cast<int32_t>(layers.size());
    const size_t items = layers[0].ends.size();
    const int32_t start = new_state(), end = new_state();
    states[start].eps.push_back(layers[0].f.start);
    // Where an item read in layer k leads: the next layer (or the counted
    // one's own copy through a counter edge), or nowhere (-1).
    std::vector<int32_t> counter_end(items, -1);
    if (counted_layer) {
      current_loop_ = loop;
      for (size_t i = 0; i < items; ++i) {
        counter_end[i] = new_state();
        states[counter_end[i]].counter =
            LocalCounter{layers[far].ends[i], layers[far + 1].ends[i], static_cast<int32_t>(hi - lo - written)};
      }
      current_loop_ = -1;
    }
    auto next = [&](int32_t k, size_t i) -> int32_t {
      if (k == far) return counter_end[i];
      if (k + 1 < n) return layers[k + 1].ends[i];
      return hi < 0 ? layers[k].ends[i] : -1;  // no upper bound: the last layer loops
    };
    std::vector<int32_t> item_of;
    for (int32_t k = 0; k < n; ++k) {
      Layer& l = layers[k];
      item_of.assign(static_cast<size_t>(l.last - l.first), -1);
      for (size_t i = 0; i < items; ++i) item_of[l.ends[i] - l.first] = static_cast<int32_t>(i);
      auto redirect = [&](int32_t& target) {
        if (target >= l.first && target < l.last && item_of[target - l.first] >= 0)
          target = next(k, static_cast<size_t>(item_of[target - l.first]));
      };
      for (int32_t s = l.first; s < l.last; ++s) {
        for (ByteEdge& b : states[s].bytes) redirect(b.target);
        for (RuleEdge& r : states[s].rules) redirect(r.target);  // class rules (kCharClass)
      }
      const bool accepts = k == far || k >= before || k >= lo;
      if (accepts) states[l.f.end].eps.push_back(end);
    }
    // Drop what cannot reach the end (edges to -1, the last layer's items).
    const int32_t first = layers[0].first, last = used_;
    std::vector<char> alive(static_cast<size_t>(last - first), 0);
    auto is_alive = [&](int32_t t) { return t >= 0 && (t < first || alive[t - first]); };
    alive[end - first] = 1;
    for (bool changed = true; changed;) {
      changed = false;
      work_.add_steps(static_cast<uint64_t>(last - first));
      for (int32_t s = last - 1; s >= first; --s) {
        if (alive[s - first]) continue;
        const LocalState& st = states[s];
        bool a = st.counter.loop_target >= 0 && (is_alive(st.counter.loop_target) || is_alive(st.counter.exit_target));
        for (int32_t t : st.eps) a = a || is_alive(t);
        for (const ByteEdge& b : st.bytes) a = a || is_alive(b.target);
        for (const RuleEdge& r : st.rules) a = a || is_alive(r.target);
        if (a) alive[s - first] = changed = 1;
      }
    }
    share_items_ = false;
    for (int32_t s = first; s < last; ++s) {
      LocalState& st = states[s];
      std::erase_if(st.eps, [&](int32_t t) { return !is_alive(t); });
      std::erase_if(st.bytes, [&](const ByteEdge& b) { return !is_alive(b.target); });
      std::erase_if(st.rules, [&](const RuleEdge& r) { return !is_alive(r.target); });
    }
    return {start, end};
  }

  // The most items any state of a layer must still read to reach its end
  // (states that cannot reach it left out): a 0-1 breadth-first search
  // backwards from the end, an edge into an item's end costing one.
  template <typename Layer>
  int64_t items_to_end(const Layer& l) {
    const int32_t n = l.last - l.first;
    std::vector<char> item_end(static_cast<size_t>(n), 0);
    for (int32_t t : l.ends) item_end[t - l.first] = 1;
    std::vector<std::vector<std::pair<int32_t, int32_t>>> preds(static_cast<size_t>(n));  // (source, cost)
    for (int32_t s = l.first; s < l.last; ++s) {
      for (int32_t t : states[s].eps)
        if (t >= l.first && t < l.last) preds[t - l.first].push_back({s - l.first, 0});
      for (const ByteEdge& b : states[s].bytes)
        if (b.target >= l.first && b.target < l.last)
          preds[b.target - l.first].push_back({s - l.first, item_end[b.target - l.first]});
      for (const RuleEdge& r : states[s].rules)
        if (r.target >= l.first && r.target < l.last)
          preds[r.target - l.first].push_back({s - l.first, item_end[r.target - l.first]});
    }
    work_.add_steps(static_cast<uint64_t>(n));
    std::vector<int64_t> dist(static_cast<size_t>(n), INT64_MAX);
    std::deque<int32_t> queue{l.f.end - l.first};
    dist[l.f.end - l.first] = 0;
    while (!queue.empty()) {
      const int32_t t = queue.front();
      queue.pop_front();
      for (auto [s, cost] : preds[t])
        if (dist[t] + cost < dist[s]) {
          dist[s] = dist[t] + cost;
          cost ? queue.push_back(s) : queue.push_front(s);
        }
    }
    int64_t most = 0;
    for (int64_t d : dist)
      if (d != INT64_MAX) most = std::max(most, d);
    return most;
  }

  std::vector<int32_t>* item_ends_ = nullptr;  // inside a length bound: the end of each item built
  bool share_items_ = false;                   // inside a length bound: large items are item-rule calls
  bool wide_only_ = false;                     // building an item rule: one-byte characters left out
  int32_t current_loop_ = -1;                  // the counted repetition being built, or -1
  int32_t num_loops_ = 0;                      // in this rule
  const Grammar& g_;
  const AutomatonLimits& limits_;
  const std::vector<char>& inlined_;
  BuildWork& work_;
  int32_t used_ = 0;
  const int32_t first_item_rule_;
  std::vector<int32_t> item_rules_;                             // expression of each item rule
  std::unordered_map<int32_t, int32_t> item_rule_of_;           // expression -> item rule, or -1
  std::unordered_map<int32_t, CodepointRanges> normalized_;     // class expression -> its ranges
  std::unordered_map<int64_t, ClassTemplate> class_templates_;  // 2 * class expression + wide_only_
};

// A rule's states after epsilon removal and merging: local ids 0..n-1
// (start = 0), edges in flat arrays (a rule may have 100k+ states: one
// allocation per state and edge list was most of the build).
struct FinishedRule {
  struct State {
    bool accepting = false;
    int32_t loop = -1;
    LocalCounter counter;
    uint32_t byte_begin = 0, byte_end = 0, rule_begin = 0, rule_end = 0;  // into bytes, rules
  };
  std::vector<State> states;
  std::vector<ByteEdge> bytes;
  std::vector<RuleEdge> rules;
};

// Sorts a state's edges into their canonical order: byte ranges to the same
// target merged (overlapping or adjacent), then ordered by (lo, target);
// calls ordered by (rule, target) without repeats. Returns the new ends.
void canonicalize(std::vector<ByteEdge>& bytes, size_t byte_begin, std::vector<RuleEdge>& rules, size_t rule_begin) {
  auto b0 = bytes.begin() + static_cast<std::ptrdiff_t>(byte_begin);
  std::sort(b0, bytes.end(), [](const ByteEdge& a, const ByteEdge& b) {
    return a.target != b.target ? a.target < b.target : a.lo < b.lo;
  });
  size_t kept = byte_begin;
  for (size_t i = byte_begin; i < bytes.size(); ++i) {
    const ByteEdge e = bytes[i];
    if (kept > byte_begin && bytes[kept - 1].target == e.target && e.lo <= bytes[kept - 1].hi + 1)
      bytes[kept - 1].hi = std::max(bytes[kept - 1].hi, e.hi);
    else
      bytes[kept++] = e;
  }
  bytes.resize(kept);
  std::sort(bytes.begin() + static_cast<std::ptrdiff_t>(byte_begin), bytes.end(),
            [](const ByteEdge& a, const ByteEdge& b) { return a.lo != b.lo ? a.lo < b.lo : a.target < b.target; });
  auto r0 = rules.begin() + static_cast<std::ptrdiff_t>(rule_begin);
  std::sort(r0, rules.end(), [](const RuleEdge& a, const RuleEdge& b) {
    return a.rule != b.rule ? a.rule < b.rule : a.target < b.target;
  });
  rules.erase(
      std::unique(rules.begin() + static_cast<std::ptrdiff_t>(rule_begin), rules.end(),
                  [](const RuleEdge& a, const RuleEdge& b) { return a.rule == b.rule && a.target == b.target; }),
      rules.end());
}

// Epsilon removal + merging of equivalent states; returns the rule's
// states (local ids 0..n-1, start = 0) with targets in local ids.
FinishedRule finish_rule(const RuleBuilder& b, Fragment f, BuildWork& budget) {
  const auto& ls = b.states;
  size_t n = static_cast<size_t>(b.num_states());
  // Epsilon closures, computed on demand for reachable states only, in
  // discovery order (which numbers the states). raw: each state's edges as
  // its closure collects them (targets in discovery ids), not yet canonical.
  FinishedRule raw;
  std::vector<int32_t> remap(n, -1);
  std::vector<int32_t> order{f.start};  // local ids in discovery order
  remap[f.start] = 0;
  std::vector<uint32_t> seen(n, 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  auto target_of = [&](int32_t t) {
    if (remap[t] < 0) {
      remap[t] = static_cast<int32_t>(order.size());
      order.push_back(t);
    }
    return remap[t];
  };
  for (size_t k = 0; k < order.size(); ++k) {
    int32_t src = order[k];
    ++stamp;
    stack.assign(1, src);
    seen[src] = stamp;
    FinishedRule::State st;
    st.byte_begin = static_cast<uint32_t>(raw.bytes.size());
    st.rule_begin = static_cast<uint32_t>(raw.rules.size());
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      budget.add_steps(1 + ls[s].bytes.size() + ls[s].rules.size());
      if (s == f.end) st.accepting = true;
      if (ls[s].counter.loop_target >= 0) {
        // One counter per closure: a round's end has no epsilon out, and
        // counted repetitions do not nest in one rule.
        BRIOCHE_CHECK(st.counter.loop_target < 0 || st.counter == ls[s].counter,
                      "grammar: two counted repetitions end at one state");
        st.counter = ls[s].counter;
      }
      raw.bytes.insert(raw.bytes.end(), ls[s].bytes.begin(), ls[s].bytes.end());
      raw.rules.insert(raw.rules.end(), ls[s].rules.begin(), ls[s].rules.end());
      for (int32_t t : ls[s].eps)
        if (seen[t] != stamp) {
          seen[t] = stamp;
          stack.push_back(t);
        }
    }
    st.byte_end = static_cast<uint32_t>(raw.bytes.size());
    st.rule_end = static_cast<uint32_t>(raw.rules.size());
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) raw.bytes[e].target = target_of(raw.bytes[e].target);
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) raw.rules[e].target = target_of(raw.rules[e].target);
    if (st.counter.loop_target >= 0) {
      st.counter.loop_target = target_of(st.counter.loop_target);
      st.counter.exit_target = target_of(st.counter.exit_target);
    }
    st.loop = ls[src].loop;
    raw.states.push_back(st);
  }
  // Merge states with identical (accepting, edges) until nothing changes:
  // they have the same future, so sharing them shrinks the mask tables.
  // Merging never makes two states differ, so every order of merges ends in
  // the same partition; the lowest id of each class survives (the start
  // state stays 0), so the result does not depend on the order either.
  // Worklist form: when a state merges away, only its predecessors' edges
  // change, so only they are looked at again (a chain of n mergeable states
  // costs O(n), not n rounds over the whole rule).
  const int32_t count = static_cast<int32_t>(raw.states.size());
  std::vector<int32_t> rep(count);
  for (int32_t i = 0; i < count; ++i) rep[i] = i;
  auto find = [&](int32_t x) {
    while (rep[x] != x) x = rep[x] = rep[rep[x]];
    return x;
  };
  // Predecessors per state (flat), and each class's members as a circular
  // list, so that a merge queues the predecessors of the whole class gone.
  std::vector<int32_t> pred_begin(count + 1, 0), preds;
  auto each_target = [&](int32_t i, auto&& fn) {
    const FinishedRule::State& st = raw.states[i];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) fn(raw.bytes[e].target);
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) fn(raw.rules[e].target);
    if (st.counter.loop_target >= 0) {
      fn(st.counter.loop_target);
      fn(st.counter.exit_target);
    }
  };
  for (int32_t i = 0; i < count; ++i) each_target(i, [&](int32_t t) { ++pred_begin[t + 1]; });
  for (int32_t i = 0; i < count; ++i) pred_begin[i + 1] += pred_begin[i];
  preds.resize(pred_begin[count]);
  {
    std::vector<int32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (int32_t i = 0; i < count; ++i) each_target(i, [&](int32_t t) { preds[fill[t]++] = i; });
  }
  std::vector<int32_t> next_member(count);
  for (int32_t i = 0; i < count; ++i) next_member[i] = i;
  // Content of each state as last computed (targets through `find`,
  // canonical), in flat pools; a newer computation appends. Comparing with
  // an older content is sound: if it equals a current content, its targets
  // are all still representatives, so it is current too.
  struct Content {
    uint32_t byte_begin = 0, byte_end = 0, rule_begin = 0, rule_end = 0;
    uint64_t hash = 0;
  };
  std::vector<Content> content(count);
  std::vector<ByteEdge> content_bytes;
  std::vector<RuleEdge> content_rules;
  content_bytes.reserve(raw.bytes.size());
  content_rules.reserve(raw.rules.size());
  auto compute_content = [&](int32_t i) {
    const FinishedRule::State& st = raw.states[i];
    Content c;
    c.byte_begin = static_cast<uint32_t>(content_bytes.size());
    c.rule_begin = static_cast<uint32_t>(content_rules.size());
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
      ByteEdge be = raw.bytes[e];
      be.target = find(be.target);
      content_bytes.push_back(be);
    }
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
      RuleEdge re = raw.rules[e];
      re.target = find(re.target);
      content_rules.push_back(re);
    }
    canonicalize(content_bytes, c.byte_begin, content_rules, c.rule_begin);
    c.byte_end = static_cast<uint32_t>(content_bytes.size());
    c.rule_end = static_cast<uint32_t>(content_rules.size());
    uint64_t h = st.accepting ? 0x9e3779b97f4a7c15ull : 0x12345ull;
    auto mix = [&](uint64_t v) {
      h = (h ^ v) * 0x100000001b3ull;
      h ^= h >> 29;
    };
    for (uint32_t e = c.byte_begin; e < c.byte_end; ++e) {
      const ByteEdge& be = content_bytes[e];
      mix((uint64_t(be.lo) << 40) | (uint64_t(be.hi) << 32) | uint32_t(be.target));
    }
    for (uint32_t e = c.rule_begin; e < c.rule_end; ++e)
      mix((uint64_t(uint32_t(content_rules[e].rule)) << 32) | uint32_t(content_rules[e].target) | (1ull << 63));
    const int32_t loop_target = st.counter.loop_target >= 0 ? find(st.counter.loop_target) : -1;
    const int32_t exit_target = st.counter.loop_target >= 0 ? find(st.counter.exit_target) : -1;
    mix((uint64_t(uint32_t(st.loop)) << 32) | uint32_t(loop_target));
    mix((uint64_t(uint32_t(exit_target)) << 32) | uint32_t(st.counter.rounds));
    c.hash = h;
    content[i] = c;
  };
  auto same_content = [&](int32_t i, int32_t j) {
    const Content &x = content[i], &y = content[j];
    const FinishedRule::State &si = raw.states[i], &sj = raw.states[j];
    if (x.hash != y.hash || si.accepting != sj.accepting || si.loop != sj.loop ||
        x.byte_end - x.byte_begin != y.byte_end - y.byte_begin ||
        x.rule_end - x.rule_begin != y.rule_end - y.rule_begin)
      return false;
    if (si.counter.rounds != sj.counter.rounds || (si.counter.loop_target < 0) != (sj.counter.loop_target < 0))
      return false;
    if (si.counter.loop_target >= 0 && (find(si.counter.loop_target) != find(sj.counter.loop_target) ||
                                        find(si.counter.exit_target) != find(sj.counter.exit_target)))
      return false;
    for (uint32_t a = x.byte_begin, b = y.byte_begin; a < x.byte_end; ++a, ++b)
      if (content_bytes[a].lo != content_bytes[b].lo || content_bytes[a].hi != content_bytes[b].hi ||
          content_bytes[a].target != content_bytes[b].target)
        return false;
    for (uint32_t a = x.rule_begin, b = y.rule_begin; a < x.rule_end; ++a, ++b)
      if (content_rules[a].rule != content_rules[b].rule || content_rules[a].target != content_rules[b].target)
        return false;
    return true;
  };
  // States by content hash: open addressing over the hashes seen, each slot
  // heading a chain of entries (a state may be entered again after its
  // content changed; older entries stay and are compared by their state's
  // latest content).
  std::vector<uint64_t> slot_hash(1024);
  std::vector<int32_t> slot_head(1024, -1);
  std::vector<int32_t> entry_state, entry_next;
  size_t used_slots = 0;
  auto slot_of = [&](uint64_t h) {
    size_t mask = slot_hash.size() - 1, s = (h ^ (h >> 31)) & mask;
    while (slot_head[s] >= 0 && slot_hash[s] != h) s = (s + 1) & mask;
    return s;
  };
  auto add_entry = [&](uint64_t h, int32_t state) {
    size_t s = slot_of(h);
    if (slot_head[s] < 0) {
      slot_hash[s] = h;
      if (++used_slots * 2 > slot_hash.size()) {
        std::vector<uint64_t> old_hash(slot_hash.size() * 2);
        std::vector<int32_t> old_head(slot_head.size() * 2, -1);
        old_hash.swap(slot_hash);
        old_head.swap(slot_head);
        for (size_t o = 0; o < old_head.size(); ++o)
          if (old_head[o] >= 0) {
            const size_t t = slot_of(old_hash[o]);
            slot_hash[t] = old_hash[o];
            slot_head[t] = old_head[o];
          }
        s = slot_of(h);
        slot_hash[s] = h;
      }
    }
    entry_state.push_back(state);
    entry_next.push_back(slot_head[s]);
    slot_head[s] = static_cast<int32_t>(entry_state.size()) - 1;
  };
  std::vector<uint64_t> entered_hash(count, 0);  // the hash a state was last entered under
  std::vector<char> entered(count, 0);
  // First in, first out, each state queued once at a time: a state with
  // many successors (the start of a wide alternative) is looked at again
  // once per round of merges below it, not once per merge.
  std::vector<int32_t> pending(count);
  std::vector<char> queued(count, 1);
  for (int32_t i = 0; i < count; ++i) pending[i] = i;
  for (size_t head = 0; head < pending.size(); ++head) {
    const int32_t i = pending[head];
    queued[i] = 0;
    if (find(i) != i) continue;
    compute_content(i);
    const uint64_t cost = 1 + content[i].byte_end - content[i].byte_begin + content[i].rule_end - content[i].rule_begin;
    budget.add_steps(cost);
    const uint64_t h = content[i].hash;
    int32_t twin = -1;
    const size_t s = slot_of(h);
    for (int32_t e = slot_head[s]; e >= 0; e = entry_next[e]) {
      const int32_t j = entry_state[e];
      if (j == i || find(j) != j) continue;
      budget.add_steps(cost);
      if (same_content(i, j)) {
        twin = j;
        break;
      }
    }
    if (twin < 0) {
      if (!entered[i] || entered_hash[i] != h) {
        add_entry(h, i);
        entered[i] = 1;
        entered_hash[i] = h;
      }
      continue;
    }
    // The lower index survives (the start state stays 0).
    const int32_t keep = std::min(i, twin), gone = std::max(i, twin);
    rep[gone] = keep;
    if (keep == i && (!entered[i] || entered_hash[i] != h)) {
      add_entry(h, i);
      entered[i] = 1;
      entered_hash[i] = h;
    }
    uint64_t queued_preds = 0;
    int32_t m = gone;
    do {
      for (int32_t k = pred_begin[m]; k < pred_begin[m + 1]; ++k) {
        const int32_t p = preds[k];
        if (!queued[p]) {
          queued[p] = 1;
          pending.push_back(p);
        }
      }
      queued_preds += static_cast<uint64_t>(pred_begin[m + 1] - pred_begin[m]);
      m = next_member[m];
    } while (m != gone);
    budget.add_steps(1 + queued_preds);
    std::swap(next_member[keep], next_member[gone]);  // splice the two classes' circular lists
  }
  // Compact: keep representatives in order, renumber (monotone, so the
  // canonical order of each state's edges is kept).
  std::vector<int32_t> id(count, -1);
  int32_t kept = 0;
  for (int32_t i = 0; i < count; ++i)
    if (find(i) == i) id[i] = kept++;
  FinishedRule out;
  out.states.reserve(kept);
  for (int32_t i = 0; i < count; ++i) {
    if (id[i] < 0) continue;
    compute_content(i);  // current: its targets are final representatives
    const FinishedRule::State& from = raw.states[i];
    FinishedRule::State st;
    st.accepting = from.accepting;
    st.loop = from.loop;
    st.counter = from.counter;
    if (st.counter.loop_target >= 0) {
      st.counter.loop_target = id[find(st.counter.loop_target)];
      st.counter.exit_target = id[find(st.counter.exit_target)];
    }
    st.byte_begin = static_cast<uint32_t>(out.bytes.size());
    for (uint32_t e = content[i].byte_begin; e < content[i].byte_end; ++e) {
      ByteEdge be = content_bytes[e];
      be.target = id[be.target];
      out.bytes.push_back(be);
    }
    st.byte_end = static_cast<uint32_t>(out.bytes.size());
    st.rule_begin = static_cast<uint32_t>(out.rules.size());
    for (uint32_t e = content[i].rule_begin; e < content[i].rule_end; ++e) {
      RuleEdge re = content_rules[e];
      re.target = id[re.target];
      out.rules.push_back(re);
    }
    st.rule_end = static_cast<uint32_t>(out.rules.size());
    out.states.push_back(st);
  }
  return out;
}

// Left recursion makes the pushdown closure non-terminating: a rule that
// can call itself (through other rules) before reading a byte is an error
// naming the cycle. Linear in the automaton: every walk below is a loop.
void reject_left_recursion(const Automaton& a) {
  const int32_t num_rules = static_cast<int32_t>(a.rule_start.size());
  const int32_t num_states = static_cast<int32_t>(a.states.size());
  // reached[s]: s is reachable from its rule's start through calls of
  // nullable rules only (rules that can complete without reading a byte).
  // Grown incrementally: when a rule turns out nullable, the walks waiting
  // at calls of it go on; each state is walked once.
  std::vector<char> nullable(num_rules, 0), reached(num_states, 0);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls_of(num_rules);  // callee -> (state, return target)
  for (int32_t s = 0; s < num_states; ++s)
    for (uint32_t i = a.states[s].rule_begin; i < a.states[s].rule_end; ++i)
      calls_of[a.rule_edges[i].rule].emplace_back(s, a.rule_edges[i].target);
  std::vector<int32_t> newly_nullable, stack;
  auto walk_from = [&](int32_t from) {
    stack.assign(1, from);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (reached[s]) continue;
      reached[s] = 1;
      const AutomatonState& st = a.states[s];
      if (st.accepting && !nullable[st.rule]) {
        nullable[st.rule] = 1;
        newly_nullable.push_back(st.rule);
      }
      for (uint32_t i = st.rule_begin; i < st.rule_end; ++i)
        if (nullable[a.rule_edges[i].rule]) stack.push_back(a.rule_edges[i].target);
      if (st.counter >= 0) {  // an epsilon move either way
        stack.push_back(a.counters[st.counter].loop_target);
        stack.push_back(a.counters[st.counter].exit_target);
      }
    }
  };
  for (int32_t r = 0; r < num_rules; ++r)
    if (a.rule_start[r] >= 0) walk_from(a.rule_start[r]);
  while (!newly_nullable.empty()) {
    const int32_t callee = newly_nullable.back();
    newly_nullable.pop_back();
    for (auto [s, target] : calls_of[callee])
      if (reached[s]) walk_from(target);
  }
  // first[r]: the rules r may call before reading a byte.
  std::vector<std::vector<int32_t>> first(num_rules);
  for (int32_t s = 0; s < num_states; ++s)
    if (reached[s])
      for (uint32_t i = a.states[s].rule_begin; i < a.states[s].rule_end; ++i)
        first[a.states[s].rule].push_back(a.rule_edges[i].rule);
  // A cycle in the "may call first" graph: depth-first with an explicit
  // stack, which is also the path for the message.
  std::vector<int> color(num_rules, 0);  // 0 new, 1 on the path, 2 done
  struct Frame {
    int32_t rule;
    size_t next;
  };
  std::vector<Frame> path;
  for (int32_t root = 0; root < num_rules; ++root) {
    if (color[root] != 0) continue;
    color[root] = 1;
    path.push_back({root, 0});
    while (!path.empty()) {
      Frame& f = path.back();
      if (f.next == first[f.rule].size()) {
        color[f.rule] = 2;
        path.pop_back();
        continue;
      }
      const int32_t c = first[f.rule][f.next++];
      if (color[c] == 1) {
        std::string cycle;
        bool on = false;
        for (const Frame& p : path) {
          if (p.rule == c) on = true;
          if (on) cycle += (cycle.size() < 2000 ? a.rule_names[p.rule] + " -> " : std::string());
        }
        fail("grammar: left recursion is not supported (", cycle, a.rule_names[c],
             "); rewrite it with repetition, e.g. expr ::= term (\"+\" term)*");
      }
      if (color[c] == 0) {
        color[c] = 1;
        path.push_back({c, 0});
      }
    }
  }
}

}  // namespace

Automaton Automaton::build(const Grammar& grammar, const AutomatonLimits& limits) {
  Automaton a;
  a.root_rule = grammar.root;
  const int32_t num_grammar_rules = static_cast<int32_t>(grammar.rules.size());
  // Lookahead assertions become extra rules after the grammar's own.
  std::vector<int32_t> la_body;
  a.rule_lookahead.assign(num_grammar_rules, -1);
  for (int32_t r = 0; r < num_grammar_rules; ++r)
    if (grammar.rules[r].lookahead >= 0) {
      a.rule_lookahead[r] = num_grammar_rules + static_cast<int32_t>(la_body.size());
      la_body.push_back(grammar.rules[r].lookahead);
    }
  const size_t num_rules = num_grammar_rules + la_body.size();
  a.rule_lookahead.resize(num_rules, -1);
  a.first_lookahead_rule = num_grammar_rules;
  a.rule_unique_item.assign(num_rules, 0);
  for (int32_t r = 0; r < num_grammar_rules; ++r)
    if (grammar.rules[r].unique_item) a.rule_unique_item[r] = a.has_unique_items = true;
  RulePlan plan = plan_rules(grammar, limits, static_cast<int32_t>(num_rules));
  a.rule_start.assign(num_rules, -1);
  std::vector<FinishedRule> per_rule(num_rules);
  BuildWork work{.limit = limits.max_work};
  a.first_item_rule = static_cast<int32_t>(num_rules);
  RuleBuilder b(grammar, limits, plan.inlined, work, a.first_item_rule);
  size_t total = 0;
  std::vector<int32_t> lookahead_owner(num_rules, -1);
  for (int32_t owner = 0; owner < num_grammar_rules; ++owner)
    if (a.rule_lookahead[owner] >= 0) lookahead_owner[a.rule_lookahead[owner]] = owner;
  for (size_t r = 0; r < num_rules; ++r) {
    bool is_la = r >= static_cast<size_t>(num_grammar_rules);
    std::string name = is_la ? grammar.rules[lookahead_owner[r]].name + "#lookahead" : grammar.rules[r].name;
    a.rule_names.push_back(name);
    if (!is_la) BRIOCHE_CHECK(grammar.rules[r].body >= 0, "grammar: rule '", grammar.rules[r].name, "' has no body");
    if (!plan.needed[r]) continue;
    b.reset();
    Fragment f = b.build(is_la ? la_body[r - num_grammar_rules] : grammar.rules[r].body);
    per_rule[r] = finish_rule(b, f, work);
    a.rule_start[r] = static_cast<int32_t>(total);
    total += per_rule[r].states.size();
    BRIOCHE_CHECK(total <= limits.max_states, "grammar too large: more than ", limits.max_states,
                  " automaton states (size budget)");
  }
  // The item rules the length bounds called (building them makes no more:
  // they are built outside any length bound).
  for (size_t k = 0; k < b.item_rules().size(); ++k) {
    b.reset();
    Fragment f = b.build_item(b.item_rules()[k]);
    per_rule.push_back(finish_rule(b, f, work));
    a.rule_start.push_back(static_cast<int32_t>(total));
    a.rule_names.push_back("item#" + std::to_string(k));
    a.rule_lookahead.push_back(-1);
    a.rule_unique_item.push_back(0);
    total += per_rule.back().states.size();
  }
  a.states.reserve(total);
  for (size_t r = 0; r < per_rule.size(); ++r) {
    int32_t base = a.rule_start[r];
    if (base < 0) continue;
    const FinishedRule& fr = per_rule[r];
    for (const FinishedRule::State& st : fr.states) {
      AutomatonState s;
      s.rule = static_cast<int32_t>(r);
      s.accepting = st.accepting;
      s.loop = static_cast<int16_t>(st.loop);
      if (st.counter.loop_target >= 0) {
        s.counter = static_cast<int32_t>(a.counters.size());
        a.counters.push_back({st.counter.loop_target + base, st.counter.exit_target + base, st.counter.rounds});
      }
      s.byte_begin = static_cast<uint32_t>(a.byte_edges.size());
      for (uint32_t i = st.byte_begin; i < st.byte_end; ++i) {
        ByteEdge e = fr.bytes[i];
        e.target += base;
        s.first_byte_lo = std::min(s.first_byte_lo, e.lo);
        s.first_byte_hi = std::max(s.first_byte_hi, e.hi);
        a.byte_edges.push_back(e);
      }
      s.byte_end = static_cast<uint32_t>(a.byte_edges.size());
      s.rule_begin = static_cast<uint32_t>(a.rule_edges.size());
      for (uint32_t i = st.rule_begin; i < st.rule_end; ++i) {
        RuleEdge e = fr.rules[i];
        e.target += base;
        a.rule_edges.push_back(e);
      }
      s.rule_end = static_cast<uint32_t>(a.rule_edges.size());
      a.states.push_back(s);
    }
    per_rule[r] = FinishedRule{};  // freed as we go
  }

  // Left recursion makes the pushdown closure non-terminating; reject it.
  reject_left_recursion(a);
  a.build_work = work.used;
  return a;
}

int32_t Automaton::rule_size(int32_t r) const {
  const int32_t begin = rule_start[r];
  if (begin < 0) return 0;
  int32_t end = begin;
  while (end < static_cast<int32_t>(states.size()) && states[end].rule == r) ++end;
  return end - begin;
}

}  // namespace brioche::grammar
