#include "grammar/compiler.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/schema_formats.h"
#include "grammar/frontier_dfa.h"
#include "grammar/pda.h"

namespace brioche::grammar {
namespace {

using Clock = std::chrono::steady_clock;

// Walks the vocabulary trie from one state with an unknown caller below it.
// After k bytes the stacks are F[k]; E[k] says some stack returned into the
// caller there. A token of length L is
//   accepted  if F[L] is non-empty or E[L] (the rule ended exactly at its end),
//   uncertain if not accepted and E[j] for some 1 <= j < L,
//   rejected  otherwise.
// Returning at j = 0 is ignored: the matcher's closure already contains the
// caller's own stacks. F[k] are configurations of a lazily built DFA shared
// by every state of the compile, so each trie node costs one table lookup.
class StatePrecompute {
 public:
  StatePrecompute(const Automaton& a, const Vocabulary& v, FrontierDfa& dfa) : a_(a), v_(v), dfa_(dfa) {
    const size_t depth = static_cast<size_t>(v_.max_token_length()) + 1;
    config_.resize(depth);
    escape_.resize(depth);
    any_escape_.resize(depth);
    cursor_.resize(depth);
    cursor_end_.resize(depth);
    by_byte_.resize(depth);
    byte_cursor_.resize(depth);
    byte_end_.resize(depth);
    byte_buffer_.resize(32 * depth);
  }

  // Appends accepted and uncertain token ids, in rank order.
  void run(int32_t state, std::vector<int32_t>& accepted, std::vector<int32_t>& uncertain_ranks) {
    const auto& nodes = v_.trie_nodes();
    const auto& edges = v_.trie_edges();
    const auto& sorted = v_.sorted_ids();
    lookahead_ = a_.rule_lookahead[a_.states[state].rule];
    lookahead_start_ = lookahead_ >= 0 ? dfa_.start(a_.rule_start[lookahead_]) : -1;
    config_[0] = dfa_.start(state);
    escape_[0] = any_escape_[0] = 0;
    // Depth-first over the trie. At depth d the children to try are either
    // all of the node's edges (edges[cursor_[d]..cursor_end_[d]) or, when
    // the configuration reads few bytes and no escape happened on the path,
    // only the children for those bytes (found by binary search).
    int32_t d = 0;
    enter(0, 0);
    while (d >= 0) {
      int32_t edge_index;
      if (by_byte_[d]) {
        if (byte_cursor_[d] == byte_end_[d]) {
          --d;
          continue;
        }
        const uint8_t b = byte_buffer_[byte_cursor_[d]++];
        const Vocabulary::TrieEdge* lo = edges.data() + cursor_[d];
        const Vocabulary::TrieEdge* hi = edges.data() + cursor_end_[d];
        const Vocabulary::TrieEdge* it =
            std::lower_bound(lo, hi, b, [](const Vocabulary::TrieEdge& e, uint8_t x) { return e.byte < x; });
        if (it == hi || it->byte != b) continue;
        cursor_[d] = static_cast<int32_t>(it - edges.data()) + 1;  // later bytes are larger
        edge_index = static_cast<int32_t>(it - edges.data());
      } else {
        if (cursor_[d] == cursor_end_[d]) {
          --d;
          continue;
        }
        edge_index = cursor_[d]++;
      }
      const Vocabulary::TrieEdge edge = edges[edge_index];
      const int32_t c = dfa_.next(config_[d], edge.byte);
      const uint8_t esc = dfa_.escaped(c) ? 1 : 0;
      const uint8_t any_esc = any_escape_[d] | esc;
      const int32_t k = d + 1;
      if (!dfa_.dead(c)) {
        const Vocabulary::TrieNode& node = nodes[edge.node];
        for (int32_t r = node.rank_begin; r < node.rank_begin + node.num_exact; ++r) accepted.push_back(sorted[r]);
        config_[k] = c;
        escape_[k] = esc;
        any_escape_[k] = any_esc;
        enter(k, edge.node);
        d = k;
        continue;
      }
      if (!any_esc) continue;  // nothing below returns to the caller: all rejected
      // Dead after k bytes: this node's tokens and its whole subtree are
      // decided by escape_ / any_escape_ alone.
      escape_[k] = esc;
      any_escape_[k] = any_esc;
      const Vocabulary::TrieNode& node = nodes[edge.node];
      const int32_t exact_end = node.rank_begin + node.num_exact;
      for (int32_t r = node.rank_begin; r < exact_end; ++r) {
        if (esc) accepted.push_back(sorted[r]);
        else if (returns_to_caller(r, k - 1)) uncertain_ranks.push_back(r);
      }
      for (int32_t r = exact_end; r < node.rank_end; ++r)
        if (returns_to_caller(r, k)) uncertain_ranks.push_back(r);
    }
  }

 private:
  // Sets up the child iteration of trie node `node` at depth d (config_[d] set).
  void enter(int32_t d, int32_t node) {
    const Vocabulary::TrieNode& n = v_.trie_nodes()[node];
    cursor_[d] = n.kid_begin;
    cursor_end_[d] = n.kid_end;
    by_byte_[d] = 0;
    if (any_escape_[d]) return;  // dead children may still hold uncertain tokens
    std::string_view bytes = dfa_.readable_bytes(config_[d]);
    const int32_t kids = n.kid_end - n.kid_begin;
    // Binary searches cost ~log2(kids) each; a scan costs one lookup per kid.
    if (static_cast<int32_t>(bytes.size()) * 8 >= kids) return;
    // (then bytes.size() < 32: kids <= 256)
    by_byte_[d] = 1;
    std::copy(bytes.begin(), bytes.end(), byte_buffer_.begin() + 32 * d);
    byte_cursor_[d] = 32 * d;
    byte_end_[d] = 32 * d + static_cast<int32_t>(bytes.size());
  }

  // Some stack returned into the caller after j bytes, 1 <= j <= upto, with
  // the rest of the token compatible with the rule's lookahead assertion
  // (a rule without one accepts any rest).
  bool returns_to_caller(int32_t rank, int32_t upto) {
    if (!any_escape_[upto]) return false;
    if (lookahead_ < 0) return true;
    std::string_view tok = v_.ranked(rank);
    for (int32_t j = 1; j <= upto; ++j)
      if (escape_[j] && lookahead_allows(tok.substr(j))) return true;
    return false;
  }

  // Whether `rest` can start what the lookahead rule matches (or contains
  // a full match of it as a prefix).
  bool lookahead_allows(std::string_view rest) {
    int32_t c = lookahead_start_;
    if (dfa_.escaped(c)) return true;
    for (unsigned char b : rest) {
      c = dfa_.next(c, b);
      if (dfa_.escaped(c)) return true;
      if (dfa_.dead(c)) return false;
    }
    return true;
  }

  const Automaton& a_;
  const Vocabulary& v_;
  FrontierDfa& dfa_;

  int32_t lookahead_ = -1, lookahead_start_ = -1;
  std::vector<int32_t> config_;  // [max token length + 1] configuration after d bytes
  std::vector<uint8_t> escape_, any_escape_;
  std::vector<int32_t> cursor_, cursor_end_;  // per depth: next child edge, end of the child list
  // Per depth, when children are looked up by byte: the bytes to try,
  // byte_buffer_[byte_cursor_[d], byte_end_[d]) (32 slots per depth).
  std::vector<uint8_t> by_byte_;
  std::vector<int32_t> byte_cursor_, byte_end_;
  std::vector<uint8_t> byte_buffer_;
};

uint64_t hash_mask(const std::vector<int32_t>& acc, const std::vector<int32_t>& unc) {
  uint64_t h = 1469598103934665603ull ^ acc.size() ^ (unc.size() << 32);
  for (int32_t x : acc) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  h ^= 0xabcdefull;
  for (int32_t x : unc) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return h;
}

// Masks keyed by (vocabulary, rule structure hash, state offset in the
// rule): equal keys have equal masks in any grammar (Automaton::
// rule_structure_hashes), so the builtin JSON rules, formats and repeated
// sub-schemas are computed once per vocabulary and process.
struct SharedKey {
  uint64_t vocab, a, b;
  int32_t offset;
  bool operator==(const SharedKey&) const = default;
};
struct SharedKeyHash {
  size_t operator()(const SharedKey& k) const {
    return static_cast<size_t>(k.a ^ (k.vocab * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(k.offset) << 17));
  }
};
struct SharedMaskCache {
  std::mutex mutex;
  std::unordered_map<SharedKey, std::shared_ptr<const StateMask>, SharedKeyHash> entries;
  size_t bytes = 0;
  static constexpr size_t kMaxBytes = 256ull << 20;  // past this the cache starts over
};
SharedMaskCache& shared_masks() {
  static SharedMaskCache cache;
  return cache;
}

std::shared_ptr<const StateMask> make_mask(const Vocabulary& v, const std::vector<int32_t>& acc,
                                           const std::vector<int32_t>& unc) {
  auto sm = std::make_shared<StateMask>();
  if (acc.size() >= static_cast<size_t>(v.num_words())) {  // a list would be larger
    sm->accepted_bits.assign(v.num_words(), 0);
    for (int32_t id : acc) sm->accepted_bits[id >> 5] |= 1u << (id & 31);
  } else {
    sm->accepted_ids = acc;  // rank order: canonical, and the matcher only ORs them
  }
  sm->uncertain_ranks = unc;
  sm->uncertain_lcp.resize(unc.size(), 0);
  for (size_t i = 1; i < unc.size(); ++i) {
    std::string_view p = v.ranked(unc[i - 1]), q = v.ranked(unc[i]);
    size_t l = 0, m = std::min(p.size(), q.size());
    while (l < m && p[l] == q[l]) ++l;
    sm->uncertain_lcp[i] = static_cast<uint16_t>(l);
  }
  return sm;
}

}  // namespace

void clear_shared_mask_cache() {
  SharedMaskCache& shared = shared_masks();
  std::lock_guard<std::mutex> lock(shared.mutex);
  shared.entries.clear();
  shared.bytes = 0;
}

void prewarm_shared_masks(const std::shared_ptr<const Vocabulary>& vocabulary) {
  CompiledGrammar::compile(Grammar::builtin_json(), vocabulary);
  nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
  for (const char* type : {"string", "number", "integer", "boolean", "null", "object", "array"})
    alternatives.push_back({{"type", type}});
  std::string formats = supported_formats();
  for (size_t pos = 0; pos < formats.size();) {
    size_t end = formats.find(", ", pos);
    if (end == std::string::npos) end = formats.size();
    alternatives.push_back({{"type", "string"}, {"format", formats.substr(pos, end - pos)}});
    pos = end + 2;
  }
  const nlohmann::ordered_json schema = {{"type", "array"}, {"items", {{"anyOf", alternatives}}}};
  for (bool any_whitespace : {true, false})
    CompiledGrammar::compile(Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = any_whitespace}),
                             vocabulary);
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar,
                                                                std::shared_ptr<const Vocabulary> vocabulary,
                                                                const CompileLimits& limits) {
  auto start = Clock::now();
  auto out = std::make_shared<CompiledGrammar>();
  out->automaton_ = Automaton::build(grammar, limits.automaton);
  out->stats_.automaton_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out->vocabulary_ = std::move(vocabulary);
  const Automaton& a = out->automaton_;
  const Vocabulary& v = *out->vocabulary_;
  const int32_t num_states = static_cast<int32_t>(a.states.size());
  out->mask_index_.assign(num_states, -1);
  out->stats_.num_states = num_states;

  FrontierDfa dfa(a);
  StatePrecompute pre(a, v, dfa);
  // Distinct masks of this compile: hash -> indices, with their accepted
  // ids (rank order) for an exact comparison.
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;
  std::vector<std::vector<int32_t>> accepted_of;
  std::unordered_map<const StateMask*, int32_t> index_of_shared;
  std::vector<int32_t> acc, unc;
  size_t total_bytes = 0;
  const std::vector<Automaton::StructureHash> rule_hash = a.rule_structure_hashes();
  SharedMaskCache& shared = shared_masks();
  auto add_mask = [&](std::shared_ptr<const StateMask> m) {
    total_bytes += m->bytes();
    BRIOCHE_CHECK(total_bytes <= limits.max_mask_bytes, "grammar compile exceeded its size budget of ",
                  limits.max_mask_bytes, " bytes of mask tables");
    out->masks_.push_back(std::move(m));
    return static_cast<int32_t>(out->masks_.size() - 1);
  };
  for (int32_t s = 0; s < num_states; ++s) {
    if (!a.has_byte_edges(s)) continue;
    const int32_t rule = a.states[s].rule;
    if (rule >= a.first_lookahead_rule) continue;  // lookaheads are only matched, never masked
    ++out->stats_.num_scannable_states;
    const SharedKey key{v.content_hash(), rule_hash[rule].a, rule_hash[rule].b, s - a.rule_start[rule]};
    {
      std::lock_guard<std::mutex> lock(shared.mutex);
      auto it = shared.entries.find(key);
      if (it != shared.entries.end()) {
        auto [pos, fresh] = index_of_shared.emplace(it->second.get(), -1);
        if (fresh) pos->second = add_mask(it->second);
        out->mask_index_[s] = pos->second;
        ++out->stats_.num_shared_states;
        continue;
      }
    }
    acc.clear();
    unc.clear();
    pre.run(s, acc, unc);
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    BRIOCHE_CHECK(elapsed <= limits.max_seconds, "grammar compile exceeded its time budget of ", limits.max_seconds,
                  " s (", out->stats_.num_scannable_states, " of the automaton's ", num_states,
                  " states done); simplify the grammar or raise CompileLimits::max_seconds");
    // Identical entries are common (e.g. every position of a whitespace
    // run); share them.
    const uint64_t h = hash_mask(acc, unc);
    int32_t found = -1;
    auto& bucket = by_hash[h];
    for (int32_t m : bucket)
      if (out->masks_[m]->uncertain_ranks == unc && accepted_of[m] == acc) {
        found = m;
        break;
      }
    if (found < 0) {
      found = add_mask(make_mask(v, acc, unc));
      accepted_of.resize(out->masks_.size());
      accepted_of[found] = acc;
      bucket.push_back(found);
    }
    out->mask_index_[s] = found;
    const auto& mask = out->masks_[found];
    std::lock_guard<std::mutex> lock(shared.mutex);
    if (shared.bytes + mask->bytes() > SharedMaskCache::kMaxBytes) {
      shared.entries.clear();
      shared.bytes = 0;
    }
    if (shared.entries.emplace(key, mask).second) shared.bytes += mask->bytes();
  }
  out->stats_.num_distinct_masks = static_cast<int32_t>(out->masks_.size());
  out->stats_.mask_bytes = total_bytes;
  out->stats_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, GrammarCacheOptions options)
    : vocabulary_(std::move(vocabulary)), options_(options) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const Grammar& grammar) {
  uint64_t key = grammar.content_hash();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  auto compiled = CompiledGrammar::compile(grammar, vocabulary_, options_.limits);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > options_.max_entries) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

void GrammarCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lru_.clear();
  index_.clear();
}

}  // namespace brioche::grammar
