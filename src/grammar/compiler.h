// Grammar x vocabulary compilation: for every automaton state that can read
// a byte, which tokens are accepted whatever the enclosing stack is, and
// which must be checked at run time because they finish the state's rule
// part-way through the token (the caller decides the rest). Everything else
// is rejected. The matcher turns this into a per-step mask with a few
// bitset ORs plus a small trie walk over the uncertain tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace brioche::grammar {

// Work units: what one compilation does, counted, so that the same grammar
// and vocabulary always get the same answer whatever the machine's load or
// the process-wide mask cache hold (never wall time). One unit is about one
// table lookup: an automaton state or edge built, a trie edge walked (plus
// the stacks of the configuration it reaches), a token accepted with its
// whole subtree, a byte of a lookahead check, a trie node counted to decide
// deferral. A state whose mask comes from the process-wide cache is charged
// what computing it costs (the walk of a state is the same in every grammar
// that shares the mask), so a warm cache makes a compile faster, not cheaper.
// Measured on the development machine (one core, Llama-3's 128k tokens):
// 0.7-1e8 mask units per second, 0.3-0.8e8 automaton units, so the default
// is ~5-15 s of one core; the largest of the 230 schemas of
// tests/server/structured_schemas.json takes 4.8e7 units (10x below it).
inline constexpr uint64_t kDefaultCompileWork = 500'000'000;

struct CompileLimits {
  uint64_t max_work = kDefaultCompileWork;  // work budget of one compilation (see above)
  size_t max_mask_bytes = 512ull << 20;     // size budget of the mask tables
  AutomatonLimits automaton;
  // States whose walk covers at most this many tokens (an estimate from
  // their first two bytes) are left to the first mask that needs them: a
  // generation visits few of the many small states (e.g. each position of a
  // whitespace run), and one costs microseconds. 8x this in grammars of
  // more than 100k automaton states. 0: compile every state.
  int64_t defer_tokens = 2048;
};

// Token classification of one automaton state.
struct StateMask {
  // Accepted tokens: a bitset over token ids when large, else sorted ids.
  std::vector<uint32_t> accepted_bits;  // [num_words] or empty
  std::vector<int32_t> accepted_ids;
  // Tokens that need the full stack, as sorted vocabulary ranks, with the
  // number of leading bytes each shares with the previous entry.
  std::vector<int32_t> uncertain_ranks;
  std::vector<uint16_t> uncertain_lcp;
  size_t bytes() const { return accepted_bits.size() * 4 + accepted_ids.size() * 4 + uncertain_ranks.size() * 6; }
};

struct CompileStats {
  int32_t num_states = 0;            // automaton states
  int32_t num_scannable_states = 0;  // states with a mask entry
  int32_t num_distinct_masks = 0;    // after sharing identical entries (at compile time)
  int32_t num_shared_states = 0;     // entries taken from the process-wide cache
  int32_t num_deferred_states = 0;   // small entries left to the first mask that needs them
  int32_t num_deep_states = 0;       // of those, the ones left for their depth in a string (MaskBuilder::is_deep)
  size_t mask_bytes = 0;
  uint64_t work = 0;  // work units of the compile (CompileLimits::max_work)
  double seconds = 0.0;
  double automaton_seconds = 0.0;  // part of `seconds` spent lowering the grammar
};

class MaskBuilder;

class CompiledGrammar {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar,
                                                        std::shared_ptr<const Vocabulary> vocabulary,
                                                        const CompileLimits& limits = {});
  CompiledGrammar();
  ~CompiledGrammar();

  const Automaton& automaton() const { return automaton_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  const std::shared_ptr<const Vocabulary>& vocabulary_ptr() const { return vocabulary_; }
  // Mask entry of a state that can read a byte (nullptr otherwise). A
  // deferred entry (small: few tokens can start there) is computed on first
  // use, under a lock; thread-safe.
  const StateMask* mask_of_state(int32_t state) const {
    const StateMask* m = state_mask_[state].load(std::memory_order_acquire);
    if (m != nullptr || !deferred_[state]) return m;
    return compute_deferred(state);
  }
  const CompileStats& stats() const { return stats_; }
  // Bytes this grammar holds (automaton, per-state tables, masks incl. ones
  // shared with the process-wide cache, the lazily built DFA kept for
  // deferred states), an estimate; grows as deferred states are computed.
  size_t memory_bytes() const;

 private:
  const StateMask* compute_deferred(int32_t state) const;
  static void build_into(CompiledGrammar& out, const Grammar& grammar, std::shared_ptr<const Vocabulary> vocabulary,
                         const CompileLimits& limits);

  Automaton automaton_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unique_ptr<std::atomic<const StateMask*>[]> state_mask_;  // per state; null: none or deferred
  std::vector<uint8_t> deferred_;                                // per state; fixed after compile
  mutable std::mutex builder_mutex_;
  mutable std::unique_ptr<MaskBuilder> builder_;  // owns the masks; builds deferred ones
  CompileStats stats_;
};

// Token masks are also kept process-wide per (vocabulary, rule structure),
// so rules that recur across grammars (the JSON string/number/value rules,
// formats, repeated sub-schemas) are computed once. This drops them (tests
// and benchmarks that want a cold compile).
void clear_shared_mask_cache();
// Computes the shared masks of the builtin JSON grammar and of the JSON
// Schema building blocks (every basic type and format, with default and
// compact whitespace; the nested levels of format: regex) for this
// vocabulary, so that later schemas only pay for their own rules. Takes
// about as long as a few cold schema compiles; worth it once per tokenizer
// in a server.
void prewarm_shared_masks(const std::shared_ptr<const Vocabulary>& vocabulary);

struct GrammarCacheOptions {
  // Least recently used entries are evicted past either bound. The bytes
  // are CompiledGrammar::memory_bytes(), measured again at every insertion
  // (deferred states grow a grammar while it is used). A grammar larger than
  // max_bytes alone is returned to its caller but not kept.
  size_t max_entries = 64;
  size_t max_bytes = 256ull << 20;
  CompileLimits limits;
  // Run prewarm_shared_masks(vocabulary) in the constructor: ~0.7 s once
  // (Llama-3, half of it format: regex), after which a new JSON schema
  // compiles in a few ms.
  bool prewarm = false;
};

// Compiled grammars of one vocabulary, keyed by the grammar's content hash.
// Thread-safe; concurrent requests for the same grammar may compile twice.
// A compile that fails keeps nothing: its masks reach the process-wide cache
// only when it succeeds, and its memory is handed back to the system.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, GrammarCacheOptions options = {});
  std::shared_ptr<const CompiledGrammar> get(const Grammar& grammar);
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }
  size_t size() const;
  size_t bytes() const;  // held by the entries, as last measured
  void clear();

 private:
  using Entry = std::pair<uint64_t, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const Vocabulary> vocabulary_;
  GrammarCacheOptions options_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // front = most recent
  size_t bytes_ = 0;
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace brioche::grammar
