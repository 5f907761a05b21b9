// A pattern with assertions as the DFA of the strings it finds a match in.
//
// The pattern becomes an NFA over *symbols* (the code points split into
// the classes no atom of the pattern tells apart) whose epsilon edges may
// carry a condition: ^ / \A (nothing read yet), $ / \Z (nothing left),
// \b / \B (the characters on both sides are / are not one word and one
// non-word character; the ends count as non-word), or a lookahead. A search
// is that NFA between two loops on every symbol.
//
// Lookahead makes it an alternating automaton: crossing (?=X) at position i
// adds an *obligation* to the thread that crossed it — the rest of the
// string must start with a match of X — and (?!X) one that it must not.
// A thread is (NFA state, obligations), each obligation the set of X's NFA
// states still alive; a positive one is met (and dropped) when X reaches
// its end, and fails the thread when no state is left; a negative one the
// other way round. The subset construction over sets of threads (with the
// class of the character before, for \b, and the count of characters read,
// for length bounds) gives a DFA, which is trimmed and minimised.
// Lookarounds nest no deeper than one level, which keeps an obligation one
// set of states; lookbehind (which would need the reversed prefix) is
// refused.
#include "grammar/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/regex_scan.h"
#include "grammar/utf8.h"

namespace brioche::grammar {
namespace {

constexpr int kMaxSymbols = 256;
constexpr int32_t kMaxNfaStates = 20000;
// Steps of the subset construction (NFA states visited by closures and
// moves): a pattern whose threads are many makes each DFA state costly
// long before the state cap; past this, refused (under a second of one core).
constexpr int64_t kMaxDeterminizeWork = 20'000'000;
using Symbols = std::bitset<kMaxSymbols>;

enum class Cond : uint8_t { kNone, kStart, kEnd, kWordBoundary, kNotWordBoundary, kLook };

struct Node {
  enum class Kind : uint8_t { kChars, kSequence, kChoice, kRepeat, kAssert, kLook };
  Kind kind = Kind::kSequence;
  CodepointRanges chars;  // kChars
  Symbols symbols;        // kChars, once the alphabet is known
  std::vector<Node> children;
  int64_t min = 1, max = 1;  // kRepeat (max < 0: unbounded)
  Cond cond = Cond::kNone;   // kAssert
  bool negative = false;     // kLook
};

std::string excerpt(const std::string& p) { return p.size() <= 80 ? p : p.substr(0, 77) + "..."; }

// Case-insensitive matching (an inline (?i)) as Python's re does it, which
// jsonschema runs: ASCII letters match both cases, and s, k and i also
// match the non-ASCII letters that fold to them (U+017F, U+212A; U+0130,
// U+0131). A class with other non-ASCII characters (whose case would need
// Unicode's tables) is refused, unless it has all of them (`.`, [^a-z]):
// then it is the complement of the folded characters it leaves out.
const std::vector<std::vector<uint32_t>>& case_groups() {
  static const std::vector<std::vector<uint32_t>> kGroups = {
      {'s', 'S', 0x17F}, {'k', 'K', 0x212A}, {'i', 'I', 0x130, 0x131}};
  return kGroups;
}

CodepointRanges ranges_of(const std::set<uint32_t>& cps) {
  CodepointRanges out;
  for (uint32_t cp : cps) {
    if (!out.empty() && out.back().second + 1 == cp)
      out.back().second = cp;
    else
      out.emplace_back(cp, cp);
  }
  return out;
}

CodepointRanges complement_ranges(const CodepointRanges& r) {
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

// The folded set of `chars` (ASCII or the special letters), or nullopt when
// `chars` holds other non-ASCII characters.
std::optional<std::set<uint32_t>> fold_small(const CodepointRanges& chars) {
  std::set<uint32_t> out;
  for (auto [lo, hi] : chars)
    for (uint32_t cp = lo; cp <= hi; ++cp) {
      bool special = false;
      for (const auto& g : case_groups())
        if (std::find(g.begin(), g.end(), cp) != g.end()) {
          out.insert(g.begin(), g.end());
          special = true;
        }
      if (special) continue;
      if (cp >= 0x80) return std::nullopt;
      out.insert(cp);
      if (cp >= 'a' && cp <= 'z') out.insert(cp - 'a' + 'A');
      if (cp >= 'A' && cp <= 'Z') out.insert(cp - 'A' + 'a');
    }
  return out;
}

std::optional<CodepointRanges> fold_case(const CodepointRanges& chars) {
  uint64_t size = 0;
  for (auto [lo, hi] : chars) size += hi - lo + 1;
  if (size <= 0x80 + 4) {
    if (auto small = fold_small(chars)) return ranges_of(*small);
  }
  const CodepointRanges left_out = complement_ranges(chars);
  uint64_t left = 0;
  for (auto [lo, hi] : left_out) left += hi - lo + 1;
  if (left > 0x80 + 4) return std::nullopt;
  if (auto small = fold_small(left_out)) return complement_ranges(ranges_of(*small));
  return std::nullopt;
}

class AssertionParser {
 public:
  AssertionParser(const std::string& p, bool json) : p_(p), json_(json) {}

  Node parse() {
    Node n = alternation();
    if (pos_ < p_.size()) error("end of pattern or '|'");
    return n;
  }
  bool uses_word_boundaries() const { return word_boundaries_; }

 private:
  const std::string& p_;
  bool json_;
  size_t pos_ = 0;
  int nesting_ = 0;
  bool in_look_ = false;
  bool word_boundaries_ = false;
  // An inline (?i) read in the enclosing group (or at the top): it holds to
  // the group's end, later branches included (PCRE's, Java's and Rust's
  // reading; Python 3.11 accepts the flag only at the start of the pattern,
  // where all of them agree).
  bool ignore_case_ = false;

  [[noreturn]] void error(const std::string& expected) const {
    fail("regex: at offset ", pos_, " of /", excerpt(p_), "/: expected ", expected, ", found ",
         pos_ < p_.size() ? "'" + p_.substr(pos_, 8) + "'" : std::string("end of pattern"));
  }
  bool peek(char c, size_t ahead = 0) const { return pos_ + ahead < p_.size() && p_[pos_ + ahead] == c; }

  Node alternation() {
    Node n{.kind = Node::Kind::kChoice};
    n.children.push_back(sequence());
    while (peek('|')) {
      ++pos_;
      n.children.push_back(sequence());
    }
    return n.children.size() == 1 ? std::move(n.children[0]) : n;
  }

  Node sequence() {
    Node n{.kind = Node::Kind::kSequence};
    while (pos_ < p_.size() && !peek('|') && !peek(')')) n.children.push_back(quantified(atom()));
    return n;
  }

  int64_t number() {
    const size_t from = pos_;
    int64_t v = 0;
    while (pos_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_]))) {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxRepeatCount) error("a repetition count at most 2147483647 in {m,n}");
    }
    return pos_ == from ? -1 : v;
  }

  Node quantified(Node a) {
    for (int stacked = 1;; ++stacked) {
      Node r{.kind = Node::Kind::kRepeat};
      if (peek('*') || peek('+') || peek('?')) {
        r.min = peek('+') ? 1 : 0;
        r.max = peek('?') ? 1 : -1;
        ++pos_;
      } else if (peek('{') && pos_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_ + 1]))) {
        ++pos_;
        r.min = r.max = number();
        if (peek(',')) {
          ++pos_;
          r.max = number();
        }
        if (!peek('}')) error("'}' closing the {m,n} quantifier");
        ++pos_;
        if (r.max >= 0 && r.max < r.min) error("{m,n} with m <= n");
      } else {
        return a;
      }
      if (nesting_ + stacked > kMaxRegexNesting) error("groups and quantifiers nested at most 256 deep");
      if (peek('?') || peek('+')) ++pos_;  // lazy / possessive: same language
      // (X*){m,n} is X* (n > 0): one loop instead of n, fewer subsets to tell apart.
      if (a.kind == Node::Kind::kRepeat && a.min == 0 && a.max < 0 && r.max != 0) continue;
      r.children.push_back(std::move(a));
      a = std::move(r);
    }
  }

  Node assertion(Cond c) {
    Node n{.kind = Node::Kind::kAssert};
    n.cond = c;
    return n;
  }

  Node atom() {
    const char c = p_[pos_];
    if (c == '(') return group();
    if (c == '^' || c == '$') {
      ++pos_;
      return assertion(c == '^' ? Cond::kStart : Cond::kEnd);
    }
    if (c == '\\' && pos_ + 1 < p_.size()) {
      const char e = p_[pos_ + 1];
      if (e == 'b' || e == 'B') word_boundaries_ = true;
      if (e == 'b' || e == 'B' || e == 'A' || e == 'Z') {
        pos_ += 2;
        return assertion(e == 'b'   ? Cond::kWordBoundary
                         : e == 'B' ? Cond::kNotWordBoundary
                         : e == 'A' ? Cond::kStart
                                    : Cond::kEnd);
      }
    }
    if (c == '*' || c == '+' || c == '?') error("something to repeat before the quantifier");
    if (c == ')') error("a matching '('");
    Node n{.kind = Node::Kind::kChars};
    const size_t from = pos_;
    n.chars = regex_character_at(p_, pos_, json_);
    if (n.chars.empty()) error("a character class that matches something");
    if (ignore_case_) {
      std::optional<CodepointRanges> folded = fold_case(n.chars);
      if (!folded) {
        pos_ = from;
        error("under (?i), a character or class of ASCII characters (or one holding every non-ASCII character)");
      }
      n.chars = std::move(*folded);
    }
    return n;
  }

  Node group() {
    if (++nesting_ > kMaxRegexNesting) error("groups nested at most 256 deep");
    ++pos_;
    if (peek('?') && peek('i', 1) && peek(')', 2)) {  // (?i): the rest of the enclosing group
      pos_ += 3;
      --nesting_;
      ignore_case_ = true;
      return Node{.kind = Node::Kind::kSequence};
    }
    const bool outer_case = ignore_case_;
    bool look = false, negative = false;
    if (peek('?')) {
      ++pos_;
      if (peek(':')) {
        ++pos_;
      } else if (peek('i') && peek(':', 1)) {  // (?i:...): this group only
        pos_ += 2;
        ignore_case_ = true;
      } else if (peek('=') || peek('!')) {
        look = true;
        negative = peek('!');
        ++pos_;
      } else if (peek('<') && (peek('=', 1) || peek('!', 1))) {
        error("no lookbehind ((?<= and (?<! are not supported)");
      } else if (peek('<') || (peek('P') && peek('<', 1))) {
        while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;
        ++pos_;
      } else {
        error("a group kind (?: (?= (?! or (?<name> (of the inline flags only (?i))");
      }
    }
    if (look && in_look_) error("no lookaround inside a lookaround");
    const bool outer = in_look_;
    in_look_ = in_look_ || look;
    Node inner = alternation();
    in_look_ = outer;
    ignore_case_ = outer_case;
    if (!peek(')')) error("')'");
    ++pos_;
    --nesting_;
    if (!look) return inner;
    Node n{.kind = Node::Kind::kLook};
    n.negative = negative;
    n.children.push_back(std::move(inner));
    return n;
  }
};

// The alphabet: code points split into the classes that no atom tells apart.
struct Alphabet {
  std::vector<CodepointRanges> ranges;  // per symbol
  Symbols word;                         // symbols of word characters (\b)
};

bool contains(const CodepointRanges& r, uint32_t cp) {
  auto it = std::upper_bound(r.begin(), r.end(), std::make_pair(cp, UINT32_MAX));
  return it != r.begin() && std::prev(it)->second >= cp;
}

Alphabet split_alphabet(std::vector<Node*>& atoms, const CodepointRanges& word) {
  std::vector<const CodepointRanges*> sets{&word};
  for (Node* a : atoms) sets.push_back(&a->chars);
  std::vector<uint32_t> cuts{0, 0x110000};
  for (const CodepointRanges* s : sets)
    for (auto [lo, hi] : *s) {
      cuts.push_back(lo);
      cuts.push_back(hi + 1);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  Alphabet out;
  std::map<std::vector<bool>, int> symbol_of;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::vector<bool> member(sets.size());
    for (size_t s = 0; s < sets.size(); ++s) member[s] = contains(*sets[s], cuts[i]);
    auto [it, fresh] = symbol_of.emplace(member, static_cast<int>(out.ranges.size()));
    if (fresh) {
      if (out.ranges.size() >= kMaxSymbols)
        fail("regex: its character classes split the code points into more than ", kMaxSymbols,
             " classes; the limit is ", kMaxSymbols);
      out.ranges.emplace_back();
    }
    CodepointRanges& r = out.ranges[it->second];
    if (!r.empty() && r.back().second + 1 == cuts[i])
      r.back().second = cuts[i + 1] - 1;
    else
      r.emplace_back(cuts[i], cuts[i + 1] - 1);
    if (member[0]) out.word.set(it->second);
    for (size_t a = 0; a < atoms.size(); ++a)
      if (member[a + 1]) atoms[a]->symbols.set(it->second);
  }
  return out;
}

void collect_atoms(Node& n, std::vector<Node*>& out) {
  if (n.kind == Node::Kind::kChars) out.push_back(&n);
  for (Node& c : n.children) collect_atoms(c, out);
}

struct Nfa {
  struct Eps {
    int32_t target;
    Cond cond;
    int32_t look;  // kLook: index into looks
  };
  struct Read {
    Symbols symbols;
    int32_t target;
  };
  struct Look {
    int32_t start, end;
    bool negative;
  };
  std::vector<std::vector<Eps>> eps;
  std::vector<std::vector<Read>> reads;
  std::vector<Look> looks;

  int32_t add() {
    if (eps.size() >= static_cast<size_t>(kMaxNfaStates))
      fail("regex: its automaton (repetitions written out) needs more than ", kMaxNfaStates, " states; the limit is ",
           kMaxNfaStates);
    eps.emplace_back();
    reads.emplace_back();
    return static_cast<int32_t>(eps.size() - 1);
  }

  std::pair<int32_t, int32_t> build(const Node& n) {
    const int32_t s = add();
    int32_t t = s;
    switch (n.kind) {
      case Node::Kind::kChars:
        t = add();
        reads[s].push_back({n.symbols, t});
        break;
      case Node::Kind::kSequence:
        for (const Node& c : n.children) {
          auto [cs, ce] = build(c);
          eps[t].push_back({cs, Cond::kNone, -1});
          t = ce;
        }
        break;
      case Node::Kind::kChoice:
        t = add();
        for (const Node& c : n.children) {
          auto [cs, ce] = build(c);
          eps[s].push_back({cs, Cond::kNone, -1});
          eps[ce].push_back({t, Cond::kNone, -1});
        }
        break;
      case Node::Kind::kRepeat: {
        for (int64_t i = 0; i < n.min; ++i) {
          auto [cs, ce] = build(n.children[0]);
          eps[t].push_back({cs, Cond::kNone, -1});
          t = ce;
        }
        if (n.max < 0) {
          auto [cs, ce] = build(n.children[0]);
          eps[t].push_back({cs, Cond::kNone, -1});
          eps[ce].push_back({t, Cond::kNone, -1});
          break;
        }
        const int32_t end = add();
        for (int64_t i = n.min; i < n.max; ++i) {
          auto [cs, ce] = build(n.children[0]);
          eps[t].push_back({cs, Cond::kNone, -1});
          eps[t].push_back({end, Cond::kNone, -1});
          t = ce;
        }
        eps[t].push_back({end, Cond::kNone, -1});
        t = end;
        break;
      }
      case Node::Kind::kAssert:
        t = add();
        eps[s].push_back({t, n.cond, -1});
        break;
      case Node::Kind::kLook: {
        auto [cs, ce] = build(n.children[0]);
        looks.push_back({cs, ce, n.negative});
        t = add();
        eps[s].push_back({t, Cond::kLook, static_cast<int32_t>(looks.size() - 1)});
        break;
      }
    }
    return {s, t};
  }
};

// What the conditions see at a position: the class of the character before
// and of the one after (kNothing: the start / the end of the string).
enum Side : int8_t { kNothing = 0, kWordChar = 1, kOtherChar = 2 };

struct Context {
  Side before, after;
};

bool holds(Cond c, Context x) {
  switch (c) {
    case Cond::kNone: return true;
    case Cond::kStart: return x.before == kNothing;
    case Cond::kEnd: return x.after == kNothing;
    case Cond::kWordBoundary: return (x.before == kWordChar) != (x.after == kWordChar);
    case Cond::kNotWordBoundary: return (x.before == kWordChar) == (x.after == kWordChar);
    case Cond::kLook: return true;
  }
  return false;
}

// An obligation: [look, NFA states of the look still alive (sorted)...].
using Obligation = std::vector<int32_t>;

struct Thread {
  int32_t state;
  std::vector<Obligation> obligations;  // sorted, unique
  auto operator<=>(const Thread&) const = default;
};

struct DState {
  Side before = kNothing;
  int64_t count = 0;
  std::vector<Thread> threads;  // sorted, unique
  auto operator<=>(const DState&) const = default;
};

class Determinizer {
 public:
  Determinizer(const Nfa& nfa, const Alphabet& alphabet, bool word_boundaries, int32_t final_state,
               const RegexDfaOptions& options)
      : nfa_(nfa), alphabet_(alphabet), word_boundaries_(word_boundaries), final_(final_state), options_(options) {}

  // The DFA over symbols: trans[s * symbols + a] (-1: dead), accepting[s].
  void run(int32_t start) {
    const int n = static_cast<int>(alphabet_.ranges.size());
    intern(DState{kNothing, 0, {Thread{start, {}}}});
    for (size_t i = 0; i < states_.size(); ++i) {
      const DState d = states_[i];
      bool accepts = false;
      step(d, -1, accepts);
      accepting.push_back(accepts && d.count >= options_.min_length);
      for (int a = 0; a < n; ++a) {
        int32_t target = -1;
        if (options_.max_length < 0 || d.count < options_.max_length) {
          bool unused = false;
          DState next{side_of(a), next_count(d.count), step(d, a, unused)};
          // Past the whole match, the character before no longer matters.
          if (next.threads.size() == 1 && next.threads[0].state == final_ && next.threads[0].obligations.empty())
            next.before = kOtherChar;
          if (!next.threads.empty()) target = intern(std::move(next));
        }
        trans.push_back(target);
      }
    }
  }

  std::vector<int32_t> trans;
  std::vector<char> accepting;
  std::vector<DState> states_;

 private:
  const Nfa& nfa_;
  const Alphabet& alphabet_;
  bool word_boundaries_;
  int32_t final_;
  const RegexDfaOptions& options_;
  std::map<DState, int32_t> index_;
  mutable int64_t work_ = 0;

  void charge(size_t steps) const {
    work_ += static_cast<int64_t>(steps);
    if (work_ > kMaxDeterminizeWork)
      fail("regex: deciding its assertions takes more than ", kMaxDeterminizeWork,
           " steps (its threads are too many); the limit is ", kMaxDeterminizeWork);
  }

  Side side_of(int a) const { return word_boundaries_ && alphabet_.word[a] ? kWordChar : kOtherChar; }
  int64_t next_count(int64_t c) const {
    const int64_t cap = options_.max_length >= 0 ? options_.max_length : options_.min_length;
    return std::min(c + 1, cap);
  }

  int32_t intern(DState d) {
    auto [it, fresh] = index_.emplace(std::move(d), static_cast<int32_t>(states_.size()));
    if (fresh) {
      if (states_.size() >= static_cast<size_t>(options_.max_states))
        fail("regex: its assertions need a DFA of more than ", options_.max_states, " states; the limit is ",
             options_.max_states);
      states_.push_back(it->first);
    }
    return it->second;
  }

  // The states reachable by epsilon edges whose conditions hold (no lookaheads inside a look).
  void close(std::vector<int32_t>& set, Context x) const {
    std::vector<char> seen(nfa_.eps.size(), 0);
    for (int32_t s : set) seen[s] = 1;
    for (size_t i = 0; i < set.size(); ++i)
      for (const Nfa::Eps& e : nfa_.eps[set[i]])
        if (!seen[e.target] && holds(e.cond, x)) {
          seen[e.target] = 1;
          set.push_back(e.target);
        }
    std::sort(set.begin(), set.end());
    charge(set.size() + nfa_.eps.size() / 16);  // the `seen` flags cleared
  }

  // The main thread's closure: each state with the lookaheads crossed on the way.
  std::set<std::pair<int32_t, std::vector<int32_t>>> close_main(int32_t from, Context x) const {
    std::set<std::pair<int32_t, std::vector<int32_t>>> seen{{from, {}}};
    std::vector<std::pair<int32_t, std::vector<int32_t>>> todo{{from, {}}};
    while (!todo.empty()) {
      auto [s, looks] = todo.back();
      todo.pop_back();
      charge(1 + nfa_.eps[s].size());
      for (const Nfa::Eps& e : nfa_.eps[s]) {
        if (!holds(e.cond, x)) continue;
        std::vector<int32_t> l = looks;
        if (e.cond == Cond::kLook && !std::binary_search(l.begin(), l.end(), e.look))
          l.insert(std::upper_bound(l.begin(), l.end(), e.look), e.look);
        if (seen.emplace(e.target, l).second) todo.emplace_back(e.target, std::move(l));
      }
    }
    return seen;
  }

  enum class Verdict { kFails, kHolds, kPending };

  // An obligation at this position (`symbol` < 0: the end of the string).
  Verdict advance(const Obligation& ob, Context x, int symbol, Obligation& next) const {
    const Nfa::Look& look = nfa_.looks[ob[0]];
    std::vector<int32_t> alive(ob.begin() + 1, ob.end());
    close(alive, x);
    const bool reached = std::binary_search(alive.begin(), alive.end(), look.end);
    if (reached) return look.negative ? Verdict::kFails : Verdict::kHolds;
    if (symbol < 0) return look.negative ? Verdict::kHolds : Verdict::kFails;
    next.assign(1, ob[0]);
    for (int32_t s : alive)
      for (const Nfa::Read& r : nfa_.reads[s])
        if (r.symbols[symbol]) next.push_back(r.target);
    std::sort(next.begin() + 1, next.end());
    next.erase(std::unique(next.begin() + 1, next.end()), next.end());
    if (next.size() == 1) return look.negative ? Verdict::kHolds : Verdict::kFails;
    return Verdict::kPending;
  }

  // Keeps `ob` (pending) in `obs`; false when it fails the thread.
  bool settle(const Obligation& ob, Context x, int symbol, std::vector<Obligation>& obs) const {
    Obligation next;
    const Verdict v = advance(ob, x, symbol, next);
    if (v == Verdict::kPending) obs.push_back(std::move(next));
    return v != Verdict::kFails;
  }

  std::vector<Thread> step(const DState& d, int symbol, bool& accepts) const {
    const Context x{d.before, symbol < 0 ? kNothing : side_of(symbol)};
    std::set<Thread> out;
    for (const Thread& t : d.threads) {
      std::vector<Obligation> kept;
      bool alive = true;
      for (const Obligation& ob : t.obligations) alive = alive && settle(ob, x, symbol, kept);
      if (!alive) continue;
      for (const auto& [s, looks] : close_main(t.state, x)) {
        std::vector<Obligation> obs = kept;
        bool ok = true;
        for (int32_t l : looks) ok = ok && settle(Obligation{l, nfa_.looks[l].start}, x, symbol, obs);
        if (!ok) continue;
        if (symbol < 0) {
          accepts = accepts || s == final_;
          continue;
        }
        std::sort(obs.begin(), obs.end());
        obs.erase(std::unique(obs.begin(), obs.end()), obs.end());
        for (const Nfa::Read& r : nfa_.reads[s])
          if (r.symbols[symbol]) out.insert(Thread{r.target, obs});
      }
    }
    // A thread past the whole match with nothing left to check accepts
    // every rest: the others add nothing (a search then stays in one state).
    for (const Thread& t : out)
      if (t.state == final_ && t.obligations.empty()) return {t};
    // A thread whose obligations include another's on the same state adds nothing.
    std::vector<Thread> kept;
    charge(out.size() * out.size() / 8 + out.size());
    for (const Thread& t : out) {
      bool subsumed = false;
      for (const Thread& u : kept)
        subsumed = subsumed || (u.state == t.state && std::includes(t.obligations.begin(), t.obligations.end(),
                                                                    u.obligations.begin(), u.obligations.end()));
      if (!subsumed) kept.push_back(t);
    }
    return kept;
  }
};

// A DFA over symbols (trans[s * n + a], -1: dead) trimmed to the states
// that reach an accepting one and minimised (Moore), its edges labelled with
// the code points of their symbols; no states when the start reaches none.
RegexDfa minimal_dfa(int n, const std::vector<int32_t>& trans, const std::vector<char>& accepting,
                     const std::vector<CodepointRanges>& symbol_ranges) {
  const int32_t m = static_cast<int32_t>(accepting.size());
  // Trim: keep the states from which an accepting one can be reached.
  std::vector<std::vector<int32_t>> preds(m);
  for (int32_t s = 0; s < m; ++s)
    for (int a = 0; a < n; ++a)
      if (int32_t t = trans[s * n + a]; t >= 0) preds[t].push_back(s);
  std::vector<char> live(m, 0);
  std::vector<int32_t> todo;
  for (int32_t s = 0; s < m; ++s)
    if (accepting[s]) live[s] = 1, todo.push_back(s);
  while (!todo.empty()) {
    const int32_t t = todo.back();
    todo.pop_back();
    for (int32_t s : preds[t])
      if (!live[s]) live[s] = 1, todo.push_back(s);
  }
  if (m == 0 || !live[0]) return {};

  // Minimise (Moore): states with the same acceptance and the same classes after each symbol are one.
  std::vector<int32_t> cls(m, -1);
  for (int32_t s = 0; s < m; ++s)
    if (live[s]) cls[s] = accepting[s] ? 1 : 0;
  for (size_t classes = 0;;) {
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next(m, -1);
    for (int32_t s = 0; s < m; ++s) {
      if (!live[s]) continue;
      std::vector<int32_t> sig{cls[s]};
      for (int a = 0; a < n; ++a) {
        const int32_t t = trans[s * n + a];
        sig.push_back(t >= 0 && live[t] ? cls[t] : -1);
      }
      next[s] = ids.emplace(std::move(sig), static_cast<int32_t>(ids.size())).first->second;
    }
    cls = std::move(next);
    if (ids.size() == classes) break;
    classes = ids.size();
  }
  // Number the classes from the start's, in the order they are met.
  std::vector<int32_t> number(m, -1), rep;
  number[cls[0]] = 0;
  rep.push_back(0);
  for (size_t i = 0; i < rep.size(); ++i)
    for (int a = 0; a < n; ++a)
      if (int32_t t = trans[rep[i] * n + a]; t >= 0 && live[t] && number[cls[t]] < 0) {
        number[cls[t]] = static_cast<int32_t>(rep.size());
        rep.push_back(t);
      }
  RegexDfa out;
  out.states.resize(rep.size());
  for (size_t i = 0; i < rep.size(); ++i) {
    RegexDfa::State& st = out.states[i];
    st.accepting = accepting[rep[i]];
    std::map<int32_t, CodepointRanges> by_target;
    for (int a = 0; a < n; ++a)
      if (int32_t t = trans[rep[i] * n + a]; t >= 0 && live[t]) {
        CodepointRanges& r = by_target[number[cls[t]]];
        r.insert(r.end(), symbol_ranges[a].begin(), symbol_ranges[a].end());
      }
    for (auto& [target, r] : by_target) {
      std::sort(r.begin(), r.end());
      CodepointRanges merged;
      for (auto [lo, hi] : r)
        if (!merged.empty() && merged.back().second + 1 >= lo)
          merged.back().second = std::max(merged.back().second, hi);
        else
          merged.emplace_back(lo, hi);
      st.edges.push_back({std::move(merged), target});
    }
  }
  return out;
}

}  // namespace

bool regex_has_assertions(const std::string& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      if (std::string("bBAZ").find(p[i + 1]) != std::string::npos) return true;
      ++i;
    } else if (p[i] == '[') {
      i = regex_class_end(p, i);
    } else if (p.compare(i, 3, "(?=") == 0 || p.compare(i, 3, "(?!") == 0 || p.compare(i, 4, "(?<=") == 0 ||
               p.compare(i, 4, "(?<!") == 0) {
      return true;
    }
  }
  return false;
}

RegexDfa regex_search_dfa(const std::string& pattern, const RegexDfaOptions& options) {
  AssertionParser parser(pattern, options.inside_json_string);
  Node root = parser.parse();
  std::vector<Node*> atoms;
  collect_atoms(root, atoms);
  const Alphabet alphabet = split_alphabet(atoms, regex_word_characters(options.inside_json_string));
  const int n = static_cast<int>(alphabet.ranges.size());
  Symbols any;
  for (int a = 0; a < n; ++a) any.set(a);
  // A search: any characters, the pattern, any characters.
  Nfa nfa;
  const int32_t start = nfa.add();
  auto [ps, pe] = nfa.build(root);
  const int32_t final_state = nfa.add();
  nfa.reads[start].push_back({any, start});
  nfa.eps[start].push_back({ps, Cond::kNone, -1});
  nfa.eps[pe].push_back({final_state, Cond::kNone, -1});
  nfa.reads[final_state].push_back({any, final_state});

  Determinizer det(nfa, alphabet, parser.uses_word_boundaries(), final_state, options);
  det.run(start);
  RegexDfa out = minimal_dfa(n, det.trans, det.accepting, alphabet.ranges);
  if (out.states.empty())
    fail("regex: no string matches /", excerpt(pattern), "/",
         options.min_length > 0 || options.max_length >= 0 ? " within the length bounds" : "");
  return out;
}

RegexDfa regex_dfa_product(const std::vector<const RegexDfa*>& all, const std::vector<const RegexDfa*>& none,
                           int32_t max_states) {
  for (const RegexDfa* d : all)
    if (d->states.empty()) return {};
  std::vector<const RegexDfa*> parts = all;
  parts.insert(parts.end(), none.begin(), none.end());
  // The code points cut into intervals that no part's edge splits; the
  // intervals every part state sends alike are one symbol.
  std::vector<uint32_t> cuts{0, 0x110000};
  for (const RegexDfa* d : parts)
    for (const RegexDfa::State& st : d->states)
      for (const RegexDfa::Edge& e : st.edges)
        for (auto [lo, hi] : e.chars) {
          cuts.push_back(lo);
          cuts.push_back(hi + 1);
        }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  const size_t intervals = cuts.size() - 1;
  std::vector<std::vector<int32_t>> column(intervals);  // per interval: each part state's target
  for (const RegexDfa* d : parts)
    for (const RegexDfa::State& st : d->states) {
      std::vector<int32_t> target(intervals, -1);
      for (const RegexDfa::Edge& e : st.edges)
        for (auto [lo, hi] : e.chars)
          for (size_t j = std::lower_bound(cuts.begin(), cuts.end(), lo) - cuts.begin(); cuts[j] <= hi; ++j)
            target[j] = e.target;
      for (size_t j = 0; j < intervals; ++j) column[j].push_back(target[j]);
    }
  std::map<std::vector<int32_t>, int> symbol_of;
  std::vector<CodepointRanges> symbol_ranges;
  std::vector<size_t> representative;  // an interval of each symbol
  for (size_t j = 0; j < intervals; ++j) {
    auto [it, fresh] = symbol_of.emplace(column[j], static_cast<int>(symbol_ranges.size()));
    if (fresh) {
      symbol_ranges.emplace_back();
      representative.push_back(j);
    }
    CodepointRanges& r = symbol_ranges[it->second];
    if (!r.empty() && r.back().second + 1 == cuts[j])
      r.back().second = cuts[j + 1] - 1;
    else
      r.emplace_back(cuts[j], cuts[j + 1] - 1);
  }
  const int n = static_cast<int>(symbol_ranges.size());
  std::vector<size_t> offset;  // where each part's states start in a column
  for (size_t p = 0, o = 0; p < parts.size(); o += parts[p]->states.size(), ++p) offset.push_back(o);
  // The product of the parts' states (-1: that part is dead), breadth first.
  std::map<std::vector<int32_t>, int32_t> index;
  std::vector<std::vector<int32_t>> tuples;
  std::vector<int32_t> trans;
  std::vector<char> accepting;
  auto intern = [&](std::vector<int32_t> t) -> int32_t {
    for (size_t p = 0; p < all.size(); ++p)
      if (t[p] < 0) return -1;
    auto [it, fresh] = index.emplace(t, static_cast<int32_t>(tuples.size()));
    if (fresh) {
      if (tuples.size() >= static_cast<size_t>(max_states))
        fail("regex: the intersection of the patterns needs a DFA of more than ", max_states, " states; the limit is ",
             max_states);
      tuples.push_back(std::move(t));
    }
    return it->second;
  };
  std::vector<int32_t> start;
  for (const RegexDfa* d : parts) start.push_back(d->states.empty() ? -1 : 0);
  intern(start);
  for (size_t i = 0; i < tuples.size(); ++i) {
    bool accepts = true;
    for (size_t p = 0; p < parts.size(); ++p) {
      const bool in = tuples[i][p] >= 0 && parts[p]->states[tuples[i][p]].accepting;
      accepts = accepts && (p < all.size() ? in : !in);
    }
    accepting.push_back(accepts);
    for (int a = 0; a < n; ++a) {
      std::vector<int32_t> next(parts.size(), -1);
      for (size_t p = 0; p < parts.size(); ++p)
        if (tuples[i][p] >= 0) next[p] = column[representative[a]][offset[p] + tuples[i][p]];
      trans.push_back(intern(std::move(next)));
    }
  }
  return minimal_dfa(n, trans, accepting, symbol_ranges);
}

RegexDfa regex_dfa_of_strings(const std::vector<std::string>& texts) {
  RegexDfa out;
  if (texts.empty()) return out;
  out.states.emplace_back();
  for (const std::string& t : texts) {
    int32_t s = 0;
    for (size_t i = 0; i < t.size();) {
      uint32_t cp = static_cast<unsigned char>(t[i]);
      const size_t len = decode_utf8(t, i, &cp);
      i += len == 0 ? 1 : len;
      int32_t next = -1;
      for (const RegexDfa::Edge& e : out.states[s].edges)
        if (e.chars[0].first == cp) next = e.target;
      if (next < 0) {
        next = static_cast<int32_t>(out.states.size());
        out.states[s].edges.push_back({{{cp, cp}}, next});
        out.states.emplace_back();
      }
      s = next;
    }
    out.states[s].accepting = true;
  }
  return out;
}

bool regex_dfa_accepts(const RegexDfa& dfa, const std::string& text) {
  if (dfa.states.empty()) return false;
  int32_t s = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = static_cast<unsigned char>(text[i]);
    const size_t len = decode_utf8(text, i, &cp);
    i += len == 0 ? 1 : len;
    int32_t next = -1;
    for (const RegexDfa::Edge& e : dfa.states[s].edges)
      if (contains(e.chars, cp)) next = e.target;
    if (next < 0) return false;
    s = next;
  }
  return dfa.states[s].accepting;
}

namespace {

// State elimination (Brzozowski-McCluskey) over the DFA with a new start and
// a new end: removing q turns each path p -> q (-> q)* -> r into an edge
// p -> r labelled A (L)* B. The state whose removal makes the fewest new
// edges goes first. "" when the text grows past the budget.
std::string eliminated_expression(const RegexDfa& dfa, bool inside_json_string, const DfaExpressionBudget& budget) {
  const int32_t n = static_cast<int32_t>(dfa.states.size());
  const int32_t start = n, end = n + 1;
  const std::string kEmpty = "\"\"";
  struct Label {
    std::string text;
    size_t classes = 0;  // character classes written in text
  };
  std::vector<std::map<int32_t, Label>> out(n + 2), in(n + 2);  // label of p -> r, both ways
  auto add = [&](int32_t p, int32_t r, const Label& label) {
    Label& l = out[p][r];
    l = l.text.empty() ? label : Label{"(" + l.text + " | " + label.text + ")", l.classes + label.classes};
    in[r][p] = l;
    return l.classes <= budget.max_classes && l.text.size() <= budget.max_bytes;
  };
  add(start, 0, {kEmpty});
  for (int32_t s = 0; s < n; ++s) {
    for (const RegexDfa::Edge& e : dfa.states[s].edges)
      add(s, e.target, {regex_class_ebnf(e.chars, inside_json_string), 1});
    if (dfa.states[s].accepting) add(s, end, {kEmpty});
  }
  auto concat = [&](const Label& a, const Label& b) {
    return a.text == kEmpty ? b : b.text == kEmpty ? a : Label{a.text + " " + b.text, a.classes + b.classes};
  };
  std::vector<char> gone(n, 0);
  for (int32_t round = 0; round < n; ++round) {
    int32_t q = -1;
    size_t best = SIZE_MAX;
    for (int32_t s = 0; s < n; ++s) {
      if (gone[s]) continue;
      const size_t cost = in[s].size() * out[s].size();
      if (cost < best) best = cost, q = s;
    }
    gone[q] = 1;
    auto self = out[q].find(q);
    const Label loop =
        self == out[q].end() ? Label{kEmpty} : Label{"(" + self->second.text + ")*", self->second.classes};
    out[q].erase(q);
    in[q].erase(q);
    const auto preds = in[q];
    const auto succs = out[q];
    for (const auto& [p, a] : preds) out[p].erase(q);
    for (const auto& [r, b] : succs) in[r].erase(q);
    for (const auto& [p, a] : preds)
      for (const auto& [r, b] : succs)
        if (!add(p, r, concat(concat(a, loop), b))) return "";
    out[q].clear();
    in[q].clear();
  }
  auto it = out[start].find(end);
  return it == out[start].end() ? "" : "(" + it->second.text + ")";
}

}  // namespace

std::string regex_dfa_expression(const RegexDfa& dfa, bool inside_json_string, const DfaExpressionBudget& budget) {
  // Order the states so that every edge but a self-loop goes forward (a
  // depth-first post-order); a back edge means a longer cycle: written by
  // state elimination instead.
  const size_t n = dfa.states.size();
  std::vector<int8_t> mark(n, 0);  // 1: on the path, 2: done
  std::vector<int32_t> post;
  std::vector<std::pair<int32_t, size_t>> stack{{0, 0}};
  mark[0] = 1;
  while (!stack.empty()) {
    auto& [s, next] = stack.back();
    if (next < dfa.states[s].edges.size()) {
      const int32_t t = dfa.states[s].edges[next++].target;
      if (t == s) continue;
      if (mark[t] == 1) return eliminated_expression(dfa, inside_json_string, budget);
      if (mark[t] == 0) {
        mark[t] = 1;
        stack.push_back({t, 0});
      }
      continue;
    }
    mark[s] = 2;
    post.push_back(s);
    stack.pop_back();
  }
  std::vector<std::string> text(n);
  std::vector<size_t> classes(n, 0);  // character classes written in text[s]
  for (int32_t s : post) {            // targets before their sources
    const RegexDfa::State& st = dfa.states[s];
    std::string loop, rest;
    for (const RegexDfa::Edge& e : st.edges) {
      ++classes[s];
      if (e.target == s) {
        loop = "(" + regex_class_ebnf(e.chars, inside_json_string) + ")*";
        continue;
      }
      const std::string& after = text[e.target];
      classes[s] += classes[e.target];
      rest += (rest.empty() ? "" : " | ") + regex_class_ebnf(e.chars, inside_json_string) +
              (after == "\"\"" ? "" : " " + after);
      if (classes[s] > budget.max_classes || rest.size() > budget.max_bytes) return "";
    }
    if (st.accepting && !rest.empty()) rest += " | \"\"";
    if (rest.empty()) rest = loop.empty() ? "\"\"" : "";
    text[s] = loop.empty() ? "(" + rest + ")" : rest.empty() ? loop : "(" + loop + " (" + rest + "))";
    if (text[s].size() > budget.max_bytes) return "";
  }
  return text[0];
}

}  // namespace brioche::grammar
