#include "grammar/compiler.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/error.h"
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
// caller's own stacks.
class StatePrecompute {
 public:
  StatePrecompute(const Automaton& a, const Vocabulary& v) : a_(a), v_(v), walker_(a, arena_) {}

  void run(int32_t state, std::vector<int32_t>& accepted_ranks, std::vector<int32_t>& uncertain_ranks) {
    arena_.truncate(0);
    const auto& lcp = v_.lcp_with_previous();
    const int32_t num_ranks = static_cast<int32_t>(v_.sorted_ids().size());
    if (frontier_.empty()) frontier_.resize(64);
    int32_t base = arena_.intern(state, kContext);
    frontier_[0].clear();
    frontier_[0].nodes.push_back(base);
    any_escape_.assign(1, 0);
    escape_.assign(1, 0);
    const AutomatonState& st = a_.states[state];
    lookahead_ = a_.rule_lookahead[st.rule];
    int32_t valid = 0;  // frontier_[0..valid] hold the current token's prefix
    int32_t rank = 0;
    while (rank < num_ranks) {
      std::string_view tok = v_.ranked(rank);
      const int32_t len = static_cast<int32_t>(tok.size());
      if (rank > 0) valid = std::min<int32_t>(valid, lcp[rank]);
      if (valid == 0) {
        // Fast reject of whole first-byte buckets the state cannot read.
        uint8_t b = static_cast<uint8_t>(tok[0]);
        if (b < st.first_byte_lo || b > st.first_byte_hi) {
          rank = b < st.first_byte_lo ? v_.first_rank_of_byte()[st.first_byte_lo]
                                      : num_ranks;
          continue;
        }
      }
      if (static_cast<size_t>(len) + 1 > frontier_.size()) frontier_.resize(len + 1);
      if (any_escape_.size() < static_cast<size_t>(len) + 1) {
        any_escape_.resize(len + 1);
        escape_.resize(len + 1);
      }
      int32_t k = valid;
      bool dead = false;
      while (k < len) {
        walker_.advance(frontier_[k], static_cast<uint8_t>(tok[k]), frontier_[k + 1]);
        ++k;
        escape_[k] = frontier_[k].escaped;
        any_escape_[k] = any_escape_[k - 1] | escape_[k];
        if (frontier_[k].nodes.empty()) {
          dead = true;
          break;
        }
      }
      valid = k;
      if (!dead) {
        accepted_ranks.push_back(rank);
        ++rank;
        continue;
      }
      // Dead after k bytes: this token and every later one sharing these k
      // bytes are decided by escape_[k] / any_escape_ alone.
      auto classify = [&](int32_t r, int32_t token_len) {
        if (token_len == k) {
          if (escape_[k]) accepted_ranks.push_back(r);
          else if (returns_to_caller(r, k - 1)) uncertain_ranks.push_back(r);
        } else if (returns_to_caller(r, k)) {
          uncertain_ranks.push_back(r);
        }
      };
      classify(rank, len);
      if (!any_escape_[k]) {
        // Nothing in the subtree can return to the caller: all rejected.
        // Binary search for its end (ranks sharing these k bytes are contiguous).
        std::string_view prefix = tok.substr(0, k);
        int32_t lo = rank + 1, hi = num_ranks;
        while (lo < hi) {
          int32_t mid = lo + (hi - lo) / 2;
          if (v_.ranked(mid).substr(0, k) == prefix) lo = mid + 1;
          else hi = mid;
        }
        rank = lo;
        continue;
      }
      ++rank;
      while (rank < num_ranks && lcp[rank] >= k) {
        classify(rank, static_cast<int32_t>(v_.ranked(rank).size()));
        ++rank;
      }
    }
  }

 private:
  // Some stack returned into the caller after j bytes, 1 <= j <= upto, with
  // the rest of the token compatible with the rule's lookahead assertion
  // (a rule without one accepts any rest).
  bool returns_to_caller(int32_t rank, int32_t upto) {
    if (lookahead_ < 0) return any_escape_[upto] != 0;
    if (!any_escape_[upto]) return false;
    std::string_view tok = v_.ranked(rank);
    for (int32_t j = 1; j <= upto; ++j)
      if (escape_[j] && lookahead_allows(tok.substr(j))) return true;
    return false;
  }

  // Whether `rest` can start what the lookahead rule matches (or contains
  // a full match of it as a prefix).
  bool lookahead_allows(std::string_view rest) {
    std::string key(rest);
    key += static_cast<char>(lookahead_ & 0xFF);
    key += static_cast<char>((lookahead_ >> 8) & 0xFF);
    auto it = lookahead_cache_.find(key);
    if (it != lookahead_cache_.end()) return it->second;
    Frontier cur, next;
    walker_.closure_of(arena_.intern(a_.rule_start[lookahead_], kContext), cur);
    bool ok = true;
    if (!cur.escaped) {
      for (unsigned char c : rest) {
        walker_.advance(cur, c, next);
        if (next.escaped) break;
        if (next.nodes.empty()) {
          ok = false;
          break;
        }
        std::swap(cur, next);
      }
    }
    lookahead_cache_.emplace(std::move(key), ok);
    return ok;
  }

  const Automaton& a_;
  const Vocabulary& v_;
  int32_t lookahead_ = -1;
  std::unordered_map<std::string, bool> lookahead_cache_;
  StackArena arena_;
  PdaWalker walker_;
  std::vector<Frontier> frontier_;
  std::vector<uint8_t> any_escape_, escape_;
};

uint64_t hash_mask(const std::vector<int32_t>& acc, const std::vector<int32_t>& unc) {
  uint64_t h = 1469598103934665603ull ^ acc.size() ^ (unc.size() << 32);
  for (int32_t x : acc) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  h ^= 0xabcdefull;
  for (int32_t x : unc) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return h;
}

// Masks of self-contained rules (no calls, e.g. a JSON string body) are the
// same in every grammar that contains the rule: keep them across compiles.
struct SharedMaskCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const StateMask>> entries;
  static constexpr size_t kMaxEntries = 4096;
};
SharedMaskCache& shared_masks() {
  static SharedMaskCache cache;
  return cache;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar,
                                                                std::shared_ptr<const Vocabulary> vocabulary,
                                                                const CompileLimits& limits) {
  auto start = Clock::now();
  auto out = std::make_shared<CompiledGrammar>();
  out->automaton_ = Automaton::build(grammar, limits.automaton);
  out->vocabulary_ = std::move(vocabulary);
  const Automaton& a = out->automaton_;
  const Vocabulary& v = *out->vocabulary_;
  const int32_t num_states = static_cast<int32_t>(a.states.size());
  out->mask_index_.assign(num_states, -1);
  out->stats_.num_states = num_states;

  StatePrecompute pre(a, v);
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;  // hash -> mask ids
  std::vector<int32_t> acc, unc;
  size_t total_bytes = 0;
  const auto& sorted = v.sorted_ids();
  // Per rule: the key prefix for the shared cache ("" = not shareable).
  std::vector<std::string> rule_key(a.rule_start.size());
  for (size_t r = 0; r < a.rule_start.size(); ++r) {
    if (static_cast<int32_t>(r) >= a.first_lookahead_rule) continue;
    std::string sig = a.self_contained_signature(static_cast<int32_t>(r));
    if (sig.empty()) continue;
    std::string la;
    if (a.rule_lookahead[r] >= 0) {
      la = a.self_contained_signature(a.rule_lookahead[r]);
      if (la.empty()) continue;
    }
    uint64_t vh = v.content_hash();
    rule_key[r] = std::string(reinterpret_cast<const char*>(&vh), sizeof vh) + std::to_string(sig.size()) + ":" +
                  sig + "|" + la;
  }
  SharedMaskCache& shared = shared_masks();
  for (int32_t s = 0; s < num_states; ++s) {
    if (!a.has_byte_edges(s)) continue;
    const int32_t rule = a.states[s].rule;
    if (rule >= a.first_lookahead_rule) continue;  // lookaheads are only matched, never masked
    ++out->stats_.num_scannable_states;
    std::string key;
    if (!rule_key[rule].empty()) {
      key = rule_key[rule] + "#" + std::to_string(s - a.rule_start[rule]);
      std::lock_guard<std::mutex> lock(shared.mutex);
      auto it = shared.entries.find(key);
      if (it != shared.entries.end()) {
        out->mask_index_[s] = static_cast<int32_t>(out->masks_.size());
        out->masks_.push_back(*it->second);
        total_bytes += it->second->bytes();
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
    uint64_t h = hash_mask(acc, unc);
    int32_t found = -1;
    for (int32_t m : by_hash[h]) {
      // Identical entries are common (e.g. every string body); share them.
      const StateMask& sm = out->masks_[m];
      if (sm.uncertain_ranks == unc) {
        found = m;
        break;
      }
    }
    if (found < 0) {
      StateMask sm;
      std::vector<int32_t> ids;
      ids.reserve(acc.size());
      for (int32_t r : acc) ids.push_back(sorted[r]);
      if (ids.size() >= static_cast<size_t>(v.num_words())) {  // a list would be larger
        sm.accepted_bits.assign(v.num_words(), 0);
        for (int32_t id : ids) sm.accepted_bits[id >> 5] |= 1u << (id & 31);
      } else {
        std::sort(ids.begin(), ids.end());
        sm.accepted_ids = std::move(ids);
      }
      sm.uncertain_ranks = unc;
      sm.uncertain_lcp.resize(unc.size(), 0);
      for (size_t i = 1; i < unc.size(); ++i) {
        std::string_view p = v.ranked(unc[i - 1]), q = v.ranked(unc[i]);
        size_t l = 0, m = std::min(p.size(), q.size());
        while (l < m && p[l] == q[l]) ++l;
        sm.uncertain_lcp[i] = static_cast<uint16_t>(l);
      }
      total_bytes += sm.bytes();
      BRIOCHE_CHECK(total_bytes <= limits.max_mask_bytes, "grammar compile exceeded its size budget of ",
                    limits.max_mask_bytes, " bytes of mask tables");
      found = static_cast<int32_t>(out->masks_.size());
      out->masks_.push_back(std::move(sm));
      by_hash[h].push_back(found);
    }
    out->mask_index_[s] = found;
    if (!key.empty()) {
      std::lock_guard<std::mutex> lock(shared.mutex);
      if (shared.entries.size() >= SharedMaskCache::kMaxEntries) shared.entries.clear();
      shared.entries.emplace(key, std::make_shared<const StateMask>(out->masks_[found]));
    }
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
