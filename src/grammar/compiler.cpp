#include "grammar/compiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/schema_formats.h"
#include "grammar/frontier_dfa.h"
#include "grammar/hash128.h"
#include "grammar/state_walk.h"
#include "grammar/pda.h"
#include "grammar/rule_dedup.h"
#include "grammar/short_walk_keys.h"

namespace brioche::grammar {
namespace {

using Clock = std::chrono::steady_clock;

// Freeing this much or more is followed by malloc_trim: glibc keeps the
// freed pages of its heaps mapped otherwise, and a server's RSS would stay
// at its high-water mark after a large grammar is evicted or fails.
constexpr size_t kTrimAfterBytes = 16u << 20;

void release_free_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// Four independent FNV-style lanes (wide masks hold ~100k ids; one
// dependent multiply chain would dominate).
uint64_t hash_ids(const std::vector<int32_t>& ids, uint64_t seed) {
  uint64_t lane[4] = {seed, seed ^ 0x9e3779b97f4a7c15ull, seed ^ 0xbf58476d1ce4e5b9ull, seed ^ 0x94d049bb133111ebull};
  size_t i = 0;
  for (; i + 4 <= ids.size(); i += 4)
    for (int k = 0; k < 4; ++k) lane[k] = (lane[k] ^ static_cast<uint32_t>(ids[i + k])) * 1099511628211ull;
  for (; i < ids.size(); ++i) lane[0] = (lane[0] ^ static_cast<uint32_t>(ids[i])) * 1099511628211ull;
  return lane[0] ^ (lane[1] * 3) ^ (lane[2] * 5) ^ (lane[3] * 7) ^ ids.size();
}

uint64_t hash_mask(const std::vector<int32_t>& acc, const std::vector<int32_t>& unc) {
  return hash_ids(acc, 1469598103934665603ull) * 31 + hash_ids(unc, 0xabcdefull);
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
// A mask and the work units its walk cost (charged again on every hit).
struct SharedMask {
  std::shared_ptr<const StateMask> mask;
  uint64_t work = 0;
};
struct SharedMaskCache {
  std::mutex mutex;
  std::unordered_map<SharedKey, SharedMask, SharedKeyHash> entries;
  size_t bytes = 0;
  static constexpr size_t kMaxBytes = 256ull << 20;  // past this the cache starts over
};
SharedMaskCache& shared_masks() {
  static SharedMaskCache cache;
  return cache;
}

// Bits of the token ids of at most `bytes` bytes, per vocabulary: built on
// first need from the nearest shorter length already built and kept for the
// process (at most max token length + 1 bitsets a vocabulary, 2 MiB for
// Llama-3), so that a deferred state's first mask (derive) does not pay a
// pass over the whole vocabulary.
const std::vector<uint32_t>& token_length_bits(const Vocabulary& v, int32_t bytes) {
  struct PerVocabulary {
    std::vector<int32_t> length_begin, ids;  // ids by byte length: [length_begin[l], length_begin[l + 1])
    std::vector<std::unique_ptr<std::vector<uint32_t>>> bits;  // [length]; null: not built yet
  };
  static std::mutex mutex;
  static std::unordered_map<uint64_t, std::unique_ptr<PerVocabulary>> all;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<PerVocabulary>& slot = all[v.content_hash() ^ static_cast<uint64_t>(v.num_tokens()) << 40];
  if (slot == nullptr) {
    slot = std::make_unique<PerVocabulary>();
    int32_t longest = 0;  // of every id (special ones too, which the trie leaves out)
    for (int32_t id = 0; id < v.num_tokens(); ++id) longest = std::max<int32_t>(longest, v.token(id).size());
    slot->length_begin.assign(longest + 2, 0);
    for (int32_t id = 0; id < v.num_tokens(); ++id) ++slot->length_begin[v.token(id).size() + 1];
    for (int32_t l = 0; l <= longest; ++l) slot->length_begin[l + 1] += slot->length_begin[l];
    slot->ids.resize(v.num_tokens());
    std::vector<int32_t> fill(slot->length_begin.begin(), slot->length_begin.end() - 1);
    for (int32_t id = 0; id < v.num_tokens(); ++id) slot->ids[fill[v.token(id).size()]++] = id;
    slot->bits.resize(longest + 1);
  }
  PerVocabulary& pv = *slot;
  bytes = std::clamp<int32_t>(bytes, 0, static_cast<int32_t>(pv.bits.size()) - 1);
  if (pv.bits[bytes] == nullptr) {
    int32_t from = bytes - 1;
    while (from >= 0 && pv.bits[from] == nullptr) --from;
    auto bits = from >= 0 ? std::make_unique<std::vector<uint32_t>>(*pv.bits[from])
                          : std::make_unique<std::vector<uint32_t>>(v.num_words(), 0);
    for (int32_t k = pv.length_begin[from + 1]; k < pv.length_begin[bytes + 1]; ++k)
      (*bits)[pv.ids[k] >> 5] |= 1u << (pv.ids[k] & 31);
    pv.bits[bytes] = std::move(bits);
  }
  return *pv.bits[bytes];
}

// Per uncertain rank, the bytes it shares with the previous one.
std::vector<uint16_t> uncertain_lcps(const Vocabulary& v, const std::vector<int32_t>& ranks) {
  std::vector<uint16_t> lcp(ranks.size(), 0);
  for (size_t i = 1; i < ranks.size(); ++i) {
    std::string_view p = v.ranked(ranks[i - 1]), q = v.ranked(ranks[i]);
    size_t l = 0, m = std::min(p.size(), q.size());
    while (l < m && p[l] == q[l]) ++l;
    lcp[i] = static_cast<uint16_t>(l);
  }
  return lcp;
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
  sm->uncertain_lcp = uncertain_lcps(v, unc);
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
  // Every state computed now (none deferred), so all of them enter the cache.
  const CompileLimits all_states{.defer_tokens = 0};
  CompiledGrammar::compile(Grammar::builtin_json(), vocabulary, all_states);
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
  // Bounded strings: the copies near a maxLength bound are keyed by what a
  // walk of up to the longest token from them meets (forward hashes), so
  // the copy with r characters left has one mask for every maxLength and
  // minLength below it. Computing them here (~130 copies, up to ~1 ms each
  // where they share few bytes with a farther copy) takes them out of every
  // schema with a bounded string, the most common keyword of real schemas.
  for (const auto& [min_length, max_length] : {std::pair{0, 0}, {1, 0}, {0, 1000}, {1, 1000}}) {
    nlohmann::ordered_json bounded = {{"type", "string"}, {"minLength", min_length}};
    if (max_length > 0) bounded["maxLength"] = max_length;
    alternatives.push_back(bounded);
  }
  const nlohmann::ordered_json schema = {{"type", "array"}, {"items", {{"anyOf", alternatives}}}};
  for (bool any_whitespace : {true, false})
    CompiledGrammar::compile(Grammar::from_json_schema(schema, SchemaOptions{.any_whitespace = any_whitespace}),
                             vocabulary, all_states);
  // format: regex nests its groups 17 levels deep, each level its own
  // rules with wide masks (most tokens fit in a regex): 0.1-0.2 s of walks
  // (Llama-3) in each schema that uses it, and about as much added here.
  // The levels below the top are the same rules in every schema (a
  // `pattern` beside it wraps only the top level). Compiled with deferral,
  // as a schema is: the cache gets the states a schema's compile walks.
  CompiledGrammar::compile(Grammar::from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"format", "regex"}}),
                           vocabulary);
}

// Per state of a string's rules, a lower bound of the bytes any path from
// the string's start reads before it; -1 elsewhere (objects, arrays:
// their states after many keys are reached by most generations). A
// string's rules: one that reads bytes only or calls the item rules of a
// length bound, and the rules it continues into: rules whose every call
// returns to the end of a string (nothing, or the closing quote, left to
// read), as the rules of a pattern counted in its DFA (one per DFA state
// and length, SchemaConverter::dfa_rules) are called. A call counts as no
// byte, except an item rule's (one byte: it reads one item of a length
// bound, so a layer reached through k item calls is k bytes deep), a
// counter's exit as its rounds - 1 (each round of a counted body reads at
// least one byte): the written-out copies near the bound of a counted
// repetition are as deep as the bound.
std::vector<int64_t> bytes_into_string(const Automaton& a) {
  const int32_t n = static_cast<int32_t>(a.states.size());
  const size_t rules = a.rule_start.size();
  auto ends_string = [&](int32_t t) {  // only returns, or reads `"` and then only returns
    const AutomatonState& st = a.states[t];
    if (st.only_returns()) return true;
    if (st.accepting || st.rule_begin != st.rule_end || st.counter >= 0 || st.byte_begin == st.byte_end) return false;
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
      const ByteEdge& b = a.byte_edges[e];
      if (b.lo != '"' || b.hi != '"' || !a.states[b.target].only_returns()) return false;
    }
    return true;
  };
  // A call continues the string when every call of its callee returns to
  // the end of a string.
  std::vector<char> every_call_ends(rules, 1);
  for (const RuleEdge& e : a.rule_edges)
    if (!ends_string(e.target)) every_call_ends[e.rule] = 0;
  auto continues = [&](const RuleEdge& e) { return e.rule < a.first_item_rule && every_call_ends[e.rule]; };
  // String rules, innermost first: a rule is one once every call it makes
  // is of an item rule or continues into a string rule.
  std::vector<char> is_string(rules, 0), blocked(rules, 0);
  std::vector<int32_t> pending(rules, 0);
  std::vector<std::vector<int32_t>> callers(rules);  // per rule, the rules whose calls continue into it
  for (int32_t s = 0; s < n; ++s)
    for (uint32_t e = a.states[s].rule_begin; e < a.states[s].rule_end; ++e) {
      const RuleEdge& re = a.rule_edges[e];
      const int32_t caller = a.states[s].rule;
      if (re.rule >= a.first_item_rule) continue;
      if (!continues(re)) {
        blocked[caller] = 1;
        continue;
      }
      ++pending[caller];
      callers[re.rule].push_back(caller);
    }
  std::vector<int32_t> ready;
  for (size_t r = 0; r < rules; ++r)
    if (a.rule_start[r] >= 0 && !blocked[r] && pending[r] == 0) ready.push_back(static_cast<int32_t>(r));
  while (!ready.empty()) {
    const int32_t r = ready.back();
    ready.pop_back();
    is_string[r] = 1;
    for (int32_t caller : callers[r])
      if (--pending[caller] == 0 && !blocked[caller] && a.rule_start[caller] >= 0) ready.push_back(caller);
  }
  // A string rule called only from string rules is as deep as the least
  // deep of its calls; any other starts at 0 (a lower bound anywhere).
  std::vector<char> entered(rules, 0);
  for (size_t r = 0; r < rules; ++r)
    entered[r] = is_string[r] && !callers[r].empty() &&
                 std::all_of(callers[r].begin(), callers[r].end(), [&](int32_t c) { return is_string[c] != 0; });
  constexpr int64_t kUnreached = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> depth(n, kUnreached);
  using Entry = std::pair<int64_t, int32_t>;  // (depth, state), least first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  auto relax = [&](int32_t t, int64_t d) {
    if (d < depth[t]) depth[t] = d, queue.push({d, t});
  };
  for (size_t r = 0; r < rules; ++r)
    if (a.rule_start[r] >= 0 && is_string[r] && !entered[r]) relax(a.rule_start[r], 0);
  while (!queue.empty()) {
    const auto [d, s] = queue.top();
    queue.pop();
    if (d != depth[s]) continue;
    const AutomatonState& st = a.states[s];
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) relax(a.byte_edges[e].target, d + 1);
    for (uint32_t e = st.rule_begin; e < st.rule_end; ++e) {
      const RuleEdge& re = a.rule_edges[e];
      // An item rule reads one item (a character, or a non-empty literal)
      // before it returns: at least one byte.
      relax(re.target, re.rule >= a.first_item_rule ? d + 1 : d);
      if (entered[re.rule]) relax(a.rule_start[re.rule], d);
    }
    if (st.counter >= 0) {
      const CounterEdge& c = a.counters[st.counter];
      relax(c.loop_target, d);
      relax(c.exit_target, d + std::max<int64_t>(0, c.rounds - 1));
    }
  }
  for (int64_t& d : depth)
    if (d == kUnreached) d = -1;
  return depth;
}

// Rules of at least this many states get walk classes and prefix twins
// (derive): below it, the partition costs more than the masks it saves. A
// pattern's bounded run ([a-z0-9-]{0,63}: ~64 states) walked the whole
// vocabulary once per position before (2-3 ms each on Llama-3).
constexpr int32_t kMinStatesForWalkClasses = 16;

// Rules larger than this get no forward hashes (MaskBuilder's constructor).
constexpr int32_t kMaxStatesForForwardHashes = 4096;

// Computes, deduplicates and owns the masks of one compiled grammar; kept
// alive after compile() for the deferred states.
class MaskBuilder {
 public:
  MaskBuilder(const Automaton& a, const Vocabulary& v, const CompileLimits& limits)
      : a_(a),
        v_(v),
        limits_(limits),
        dfa_(a),
        pre_(a, v, dfa_),
        rule_hash_(a.rule_structure_hashes()),
        class_offset_(
            a.walk_class_offsets(v.max_token_length() + 1, kMinStatesForWalkClasses, &twin_offset_, &twin_bytes_)),
        reading_(a.rules_reading_before_return()),
        short_walk_keys_(a, rule_hash_, reading_, [this](int32_t s) {
          const SharedKey k = key_of(s);
          Hasher128 h;
          h.add(k.a);
          h.add(k.b);
          h.add(static_cast<uint64_t>(static_cast<uint32_t>(k.offset)));
          return Key128{h.a, h.b | 1};
        }) {
    // Forward hashes where they pay: byte-level rules (no calls: strings
    // and patterns) with copies near a bound (prefix twins), whose masks
    // recur across bounds; elsewhere the rule's own key. Rules that call
    // others (objects, arrays) are left out: their rounds (up to the longest
    // token over all their states) cost more than they share.
    std::vector<char> near_bound(a.rule_start.size(), 0);
    for (size_t s = 0; s < a.states.size(); ++s)
      if (twin_offset_[s] >= 0) near_bound[a.states[s].rule] = 1;
    for (size_t s = 0; s < a.states.size(); ++s)
      if (a.states[s].rule_begin != a.states[s].rule_end) near_bound[a.states[s].rule] = 0;
    for (size_t r = 0; r < near_bound.size(); ++r)
      if (near_bound[r] && a.rule_size(static_cast<int32_t>(r)) > kMaxStatesForForwardHashes) near_bound[r] = 0;
    forward_ = a.forward_hashes(v.max_token_length() + 1, rule_hash_, near_bound);
    depth_ = bytes_into_string(a);
    many_states_ = a.states.size() > kManyStates;
  }

  // A state's mask is named by what every walk of up to the longest token
  // from it meets (Automaton::forward_hashes), so that states alike in
  // different rules or grammars share it (near the bounds of strings with
  // different maxLength); where that is not computed, by its rule's
  // structure and the first state of that rule that walks every token the
  // same way (walk_class_offsets).
  static constexpr int32_t kForwardKey = -1;  // offsets are >= 0
  SharedKey key_of(int32_t s) const {
    const Automaton::StructureHash& f = forward_[s];
    if (f.a != 0 || f.b != 0) return SharedKey{v_.content_hash(), f.a, f.b, kForwardKey};
    const int32_t rule = a_.states[s].rule;
    return SharedKey{v_.content_hash(), rule_hash_[rule].a, rule_hash_[rule].b, class_offset_[s]};
  }

  // The state's mask from this compile's earlier states (same rule
  // structure) or the process-wide cache, or nullptr; `walk_work` gets the
  // work units the caller charges for it: nothing for one of this compile
  // (the same grammar always shares it), its walk for a cache entry (what
  // other grammars compiled before must not change the answer).
  const StateMask* shared(int32_t s, uint64_t* walk_work) {
    const SharedKey key = key_of(s);
    if (auto it = pending_.find(key); it != pending_.end()) {
      *walk_work = 0;
      return it->second.mask.get();
    }
    SharedMaskCache& cache = shared_masks();
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it == cache.entries.end()) return nullptr;
    if (owned_.insert(it->second.mask.get()).second) keep(it->second.mask);
    *walk_work = it->second.work;
    pending_.emplace(key, it->second);  // later states of the same key: as if computed here
    return it->second.mask.get();
  }

  // Whether the walk from s is small: an upper estimate of it (the tokens
  // under the first two bytes s can read; most of a narrow state's walk
  // dies right there) is at most `limit`. Stops counting past the limit.
  bool walk_is_small(int32_t s, int64_t limit) {
    // The estimate reads two bytes: states whose walks agree that far (the
    // far copies of an unrolled repetition, the copies of an array's items
    // and an object's members) are decided once per compile.
    const Key128 key = short_walk_keys_.two_bytes(s);
    if (auto it = small_walk_.find(key); it != small_walk_.end()) return it->second;
    const bool small = walk_is_small_uncached(s, limit);
    small_walk_.emplace(key, small);
    return small;
  }

  bool walk_is_small_uncached(int32_t s, int64_t limit) {
    const auto& nodes = v_.trie_nodes();
    const auto& edges = v_.trie_edges();
    auto child = [&](int32_t node, uint8_t b) -> int32_t {
      const Vocabulary::TrieEdge* lo = edges.data() + nodes[node].kid_begin;
      const Vocabulary::TrieEdge* hi = edges.data() + nodes[node].kid_end;
      auto it = std::lower_bound(lo, hi, b, [](const Vocabulary::TrieEdge& e, uint8_t x) { return e.byte < x; });
      return it != hi && it->byte == b ? it->node : -1;
    };
    init_root_children();  // the root's child per byte, looked up once
    const int32_t c0 = dfa_.start(s);
    int64_t total = 0;
    // One level first: every token starting with a readable byte. Often
    // already small (digits, hex), and it needs no new DFA transitions.
    const std::string first_bytes(dfa_.readable_bytes(c0));
    work_ += 1 + first_bytes.size();
    for (char b1 : first_bytes) {
      const int32_t n1 = root_child_[static_cast<uint8_t>(b1)];
      if (n1 >= 0) total += nodes[n1].rank_end - nodes[n1].rank_begin;
    }
    if (total <= limit) return true;
    total = 0;
    for (char b1 : first_bytes) {
      const int32_t n1 = root_child_[static_cast<uint8_t>(b1)];
      if (n1 < 0) continue;
      const int32_t c1 = dfa_.next(c0, static_cast<uint8_t>(b1));
      if (dfa_.escaped(c1)) {  // the rule can end here: every token below may need a lookahead check
        total += nodes[n1].rank_end - nodes[n1].rank_begin;
      } else {
        total += nodes[n1].num_exact;
        if (!dfa_.dead(c1))
          for (char b2 : std::string(dfa_.readable_bytes(c1))) {
            ++work_;
            const int32_t n2 = child(n1, static_cast<uint8_t>(b2));
            if (n2 >= 0) total += nodes[n2].rank_end - nodes[n2].rank_begin;
          }
      }
      if (total > limit) return false;
    }
    return true;
  }

  // Whether s has a prefix twin (derive) that reads alike at least
  // kMinLazyTwinBytes bytes: then its mask is left to the first mask that
  // needs it (deferred), whatever its size. Near the bound of a repetition
  // every copy has its own mask (the last max-token-length copies of each
  // string with maxLength, each layer of a pattern's length count), and a
  // generation visits a few of them: computing all of them eagerly was the
  // largest part of the slowest compiles (0.1 ms each, thousands per
  // schema). The derivation walks only the tokens longer than the shared
  // bytes: with 16 or more, ~35 us on Llama-3 at first use; with fewer it
  // costs 0.2-0.4 ms, too much for a mask, so those stay eager.
  static constexpr int32_t kMinLazyTwinBytes = 16;
  bool has_prefix_twin(int32_t s) const { return twin_offset_[s] >= 0 && twin_bytes_[s] >= kMinLazyTwinBytes; }

  // Whether s lies at least kDeepBytes bytes into a string or pattern
  // (bytes_into_string): then its mask is left to its first use, whatever it
  // costs. The layers of a length bound near its far end (the last
  // max-token-length copies, each with its own mask) are reached only by a
  // generation that wrote that many characters of the string, which pays
  // their walks (0.1-2 ms each) over at least kDeepBytes / longest-token
  // steps; computed eagerly they were most of the slowest compiles (the
  // ARN and tag patterns of CloudFormation schemas under maxLength
  // 1024-2048: thousands of such states, seconds).
  static constexpr int64_t kDeepBytes = 32;
  bool is_deep(int32_t s) const { return depth_[s] >= kDeepBytes; }

  // Whether the wide state s has a first-byte twin from which it derives
  // (derive_first_bytes) by walking at most kMaxLazyTwinTokens tokens (under
  // the first bytes where the two differ): then it is left to its first use
  // too (the inner nodes of excluded-key tries, a few letters each:
  // thousands in a large schema, few of them ever reached). The roots of
  // the tries differ from their twins under most letters (0.1-0.6 ms on
  // Llama-3) and are the ones a generation reaches: computed eagerly.
  // Charges the key computation.
  static constexpr int64_t kMaxLazyTwinTokens = 16384;
  bool has_first_byte_twin(int32_t s) {
    const int64_t tokens = first_byte_tokens(s);
    if (tokens < v_.num_words()) return false;
    uint64_t key_work = 0;
    const Key128 twin_key = first_byte_keys(s, s_keys_, &key_work);
    work_ += key_work;
    auto it = first_byte_twins_.find(twin_key);
    if (it == first_byte_twins_.end()) return false;
    first_byte_keys(it->second.state, t_keys_, &key_work);
    const int64_t shared = shares_first_bytes();
    return shared == kAllFirstBytesSame ||
           (shared >= v_.num_words() && (tokens - shared <= kMaxLazyTwinTokens || many_states_));
  }
  // In a grammar of more than this many automaton states the roots are
  // deferred too: the Kubernetes list schema (184k states) has 1.8k of them
  // at ~0.25 ms each, half a second of its compile, and a generation
  // reaches a few dozen (each then costs its first mask ~0.25 ms).
  static constexpr size_t kManyStates = 100'000;
  // The deferral bound of small walks (CompileLimits::defer_tokens), raised
  // 8x in grammars of more than kManyStates states: there thousands of
  // states walk a few thousand tokens each (the Kubernetes list's 6k
  // excluded-key nodes at ~40 us each: a quarter of a second of its
  // compile), which is then what such a state's first mask costs.
  int64_t small_walk_limit(int64_t defer_tokens) const { return many_states_ ? 8 * defer_tokens : defer_tokens; }

  // A wide state taken from a cache (this compile's or the process's) is
  // a first-byte twin of later states as if it had been walked here
  // (compute() registers the ones it walks), so that which states
  // has_first_byte_twin defers, and what they are charged, does not depend
  // on what the process compiled before.
  void note_shared(int32_t s) {
    if (twin_offset_[s] >= 0 || first_byte_tokens(s) < v_.num_words()) return;
    auto entry = pending_.find(key_of(s));
    if (entry == pending_.end()) return;
    uint64_t unused = 0;
    first_byte_twins_.emplace(first_byte_keys(s, s_keys_, &unused), FirstByteTwin{s, entry->second.mask});
  }

  const StateMask* compute(int32_t s) {
    // A state with a prefix twin is derived from it (the twin computed
    // first where it is not yet): in the eager pass, and at first use where
    // it was deferred for its twin (deferred small states: their own walk
    // is cheaper than a derivation's bitset passes over the vocabulary).
    if (twin_offset_[s] >= 0 && (!eager_pass_done_ || has_prefix_twin(s))) return derive(s);
    // A wide state whose first bytes mostly lead where an earlier state's
    // do: copy those tokens from it and walk only the others.
    const bool wide = first_byte_tokens(s) >= v_.num_words();
    Key128 twin_key{};
    uint64_t key_work = 0;  // part of the state's charge (stored with its mask, so a cache hit pays it too)
    if (wide) {
      twin_key = first_byte_keys(s, s_keys_, &key_work);
      if (auto it = first_byte_twins_.find(twin_key); it != first_byte_twins_.end())
        if (const StateMask* m = derive_first_bytes(s, it->second, &key_work)) return m;
    }
    acc_.clear();
    unc_.clear();
    const uint64_t walk_start = pre_.work();
    pre_.run(s, acc_, unc_);
    const uint64_t walk = pre_.work() - walk_start + key_work;
    work_ += walk;
    // Identical entries are common (e.g. every position of a whitespace
    // run); share them.
    const uint64_t h = hash_mask(acc_, unc_);
    auto& bucket = by_hash_[h];
    std::shared_ptr<const StateMask> mask;
    for (size_t i : bucket)
      if (masks_[i]->uncertain_ranks == unc_ && accepted_of_[i] == acc_) {
        mask = masks_[i];
        break;
      }
    if (mask == nullptr) {
      mask = make_mask(v_, acc_, unc_);
      bucket.push_back(masks_.size());
      accepted_of_.resize(masks_.size() + 1);
      accepted_of_.back() = acc_;
      keep(mask);
    }
    const StateMask* found = mask.get();
    // Published to the process-wide cache only once the compile succeeded
    // (a failed one keeps nothing); until then later states of this
    // grammar find it in pending_.
    pending_.emplace(key_of(s), SharedMask{mask, walk});
    if (eager_pass_done_) publish();
    if (wide) first_byte_twins_.emplace(twin_key, FirstByteTwin{s, mask});
    return found;
  }

  // Work units so far (walks, deferral checks, hits charged their walks).
  uint64_t work() const { return work_; }
  void charge(uint64_t units) { work_ += units; }

  // Bytes held, an estimate (see CompiledGrammar::memory_bytes).
  size_t memory_bytes() const {
    size_t accepted = 0;
    for (const auto& ids : accepted_of_) accepted += ids.capacity() * sizeof(int32_t) + sizeof(ids);
    return total_bytes_ + masks_.capacity() * sizeof(masks_[0]) + masks_.size() * 64 + accepted + by_hash_.size() * 64 +
           owned_.size() * 32 + pending_.size() * 64 + dfa_.memory_bytes() +
           (acc_.capacity() + unc_.capacity()) * sizeof(int32_t);
  }

  // After the eager pass only deferred (small) states are computed, so the
  // accepted lists kept for deduplication of large masks are dropped: the
  // builder lives as long as the compiled grammar. The masks computed so
  // far go to the process-wide cache (the compile succeeded).
  void end_eager_pass() {
    eager_pass_done_ = true;
    publish();
    short_walk_keys_.release();
    decltype(small_walk_)().swap(small_walk_);
    const size_t large = static_cast<size_t>(v_.num_words());
    for (auto& [hash, bucket] : by_hash_)
      bucket.erase(
          std::remove_if(bucket.begin(), bucket.end(), [&](size_t i) { return accepted_of_[i].size() >= large; }),
          bucket.end());
    for (auto& accepted : accepted_of_)
      if (accepted.size() >= large) std::vector<int32_t>().swap(accepted);
  }

  size_t total_bytes() const { return total_bytes_; }
  int32_t num_masks() const { return static_cast<int32_t>(masks_.size()); }

 private:
  // ---- First-byte twins ----
  // Every token that starts with byte b is classified from the
  // configuration after b (and, where it returns into the caller, the
  // rule's lookahead), so two states whose configurations after b hold the
  // same stacks up to structure classify those tokens alike. The trie
  // nodes of an excluded-key rule (a key must differ from the declared
  // ones: one rule per node, thousands in a large schema) differ from each
  // other only in the few bytes that follow the trie; every other first
  // byte leads into the same "rest of a key" rule. Their masks are copied
  // from the first such state and only the differing first bytes walked.
  using Key128 = Automaton::StructureHash;
  struct Key128Hash {
    size_t operator()(const Key128& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull)); }
  };
  struct FirstByteTwin {
    int32_t state;
    std::shared_ptr<const StateMask> mask;
  };
  static constexpr Key128 kCallerKey{0x0123456789abcdefull, 0xfedcba9876543210ull};

  // Tokens whose first byte s can read (an upper bound of its walk).
  int64_t first_byte_tokens(int32_t s) {
    const auto& nodes = v_.trie_nodes();
    init_root_children();
    int64_t total = 0;
    for (char b : dfa_.readable_bytes(dfa_.start(s))) {
      const int32_t n = root_child_[static_cast<uint8_t>(b)];
      if (n >= 0) total += nodes[n].rank_end - nodes[n].rank_begin;
    }
    return total;
  }

  // A stack by what it does: each frame by its rule's structure hash and
  // its state's offset in the rule, down to the unknown caller. A frame at
  // a state that only returns (accepting, no edges) is left out: the
  // closure passes through it without reading, so [x | it | caller] and
  // [x | caller] walk alike.
  Key128 stack_key(int32_t node) {
    const StackArena& arena = dfa_.arena();
    if (node_key_.size() < static_cast<size_t>(arena.size())) node_key_.resize(arena.size());
    chain_.clear();
    int32_t n = node;
    while (n >= 0 && node_key_[n].a == 0 && node_key_[n].b == 0) {
      chain_.push_back(n);
      n = arena.node(n).parent;
    }
    Key128 below = n >= 0 ? node_key_[n] : kCallerKey;
    for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) {
      const StackNode& frame = arena.node(*it);
      const AutomatonState& st = a_.states[frame.state];
      const bool only_returns =
          st.accepting && st.byte_begin == st.byte_end && st.rule_begin == st.rule_end && st.counter < 0;
      if (!only_returns) {
        Hasher128 h;
        h.add(rule_hash_[st.rule].a);
        h.add(rule_hash_[st.rule].b);
        h.add(static_cast<uint64_t>(frame.state - a_.rule_start[st.rule]));
        if (frame.unique != 0) h.add(0xA1000000ull ^ static_cast<uint32_t>(frame.unique));  // an item in progress
        h.add(below.a);
        h.add(below.b);
        below = Key128{h.a, h.b | 1};  // never {0, 0} (= not computed)
      }
      node_key_[*it] = below;
    }
    return below;
  }

  // A configuration by its stacks' keys (a set) and whether it returned
  // into the caller; {0, 0} for the dead one (no stack, no return).
  Key128 config_key(int32_t c) {
    if (config_key_.size() <= static_cast<size_t>(c)) config_key_.resize(dfa_.num_configs());
    Key128& key = config_key_[c];
    if (key.a != 0 || key.b != 0 || dfa_.flags(c) == FrontierDfa::kDead) return key;
    frame_keys_.clear();
    for (int32_t node : dfa_.stacks(c)) frame_keys_.push_back(stack_key(node));
    std::sort(frame_keys_.begin(), frame_keys_.end(),
              [](const Key128& x, const Key128& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
    frame_keys_.erase(std::unique(frame_keys_.begin(), frame_keys_.end()), frame_keys_.end());
    Hasher128 h;
    h.add((dfa_.escaped(c) ? 0xE1 : 0xE0) | (dfa_.item_end(c) ? 0x100 : 0));
    h.add(frame_keys_.size());
    for (const Key128& k : frame_keys_) {
      h.add(k.a);
      h.add(k.b);
    }
    key = Key128{h.a, h.b | 1};
    return key;
  }

  // keys[b]: the configuration key after first byte b from s ({0, 0}
  // where s cannot read b). Returns the key under which s is looked up as
  // a twin: its lookahead's structure and its widest first byte's key.
  Key128 first_byte_keys(int32_t s, std::array<Key128, 256>& keys, uint64_t* work) {
    keys.fill(Key128{});
    const int32_t c0 = dfa_.start(s);
    const std::string bytes(dfa_.readable_bytes(c0));  // a copy: next() may grow the pool
    const auto& nodes = v_.trie_nodes();
    int32_t widest = -1, widest_tokens = -1;
    for (char ch : bytes) {
      const uint8_t b = static_cast<uint8_t>(ch);
      keys[b] = config_key(dfa_.next(c0, b));
      const int32_t n = root_child_[b];
      const int32_t tokens = n >= 0 ? nodes[n].rank_end - nodes[n].rank_begin : 0;
      if (tokens > widest_tokens) widest = b, widest_tokens = tokens;
    }
    *work += 1 + bytes.size();
    const int32_t la = a_.rule_lookahead[a_.states[s].rule];
    Hasher128 h;
    h.add(la >= 0 ? rule_hash_[la].a : 0);
    h.add(la >= 0 ? rule_hash_[la].b : 0);
    h.add(static_cast<uint64_t>(widest));
    if (widest >= 0) {
      h.add(keys[widest].a);
      h.add(keys[widest].b);
    }
    return Key128{h.a, h.b};
  }

  // The tokens under the first bytes after which s and its twin (s_keys_,
  // t_keys_) reach equal configurations, and those bytes in `same` ([4],
  // optional); kAllFirstBytesSame when that is every byte.
  static constexpr int64_t kAllFirstBytesSame = std::numeric_limits<int64_t>::max();
  int64_t shares_first_bytes(uint64_t* same = nullptr) {
    const auto& nodes = v_.trie_nodes();
    int64_t shared_tokens = 0;
    bool all_same = true;
    for (int b = 0; b < 256; ++b) {
      if (s_keys_[b] != t_keys_[b]) {
        all_same = false;
        continue;
      }
      if (same != nullptr) same[b >> 6] |= 1ull << (b & 63);
      const int32_t n = root_child_[b];
      if (n >= 0 && (s_keys_[b].a != 0 || s_keys_[b].b != 0)) shared_tokens += nodes[n].rank_end - nodes[n].rank_begin;
    }
    return all_same ? kAllFirstBytesSame : shared_tokens;
  }

  // The mask of s from a first-byte twin (s_keys_ holds s's keys): the
  // twin's tokens under the first bytes where both lead to equal
  // configurations, walked tokens under the others. nullptr when they
  // share too little to be worth it (the caller walks s).
  const StateMask* derive_first_bytes(int32_t s, const FirstByteTwin& twin, uint64_t* key_work) {
    first_byte_keys(twin.state, t_keys_, key_work);
    const auto& nodes = v_.trie_nodes();
    const auto& sorted = v_.sorted_ids();
    uint64_t same[4] = {0, 0, 0, 0};
    const int64_t shared_tokens = shares_first_bytes(same);
    const bool all_same = shared_tokens == kAllFirstBytesSame;
    const StateMask* from = twin.mask.get();
    const int32_t words = v_.num_words();
    if (all_same) {  // every token alike: the twin's mask itself
      work_ += *key_work;
      pending_.emplace(key_of(s), SharedMask{twin.mask, *key_work});
      if (eager_pass_done_) publish();
      return twin.mask.get();
    }
    if (shared_tokens < words) return nullptr;
    auto in_same = [&](std::string_view token) {
      const uint8_t b = static_cast<uint8_t>(token[0]);
      return (same[b >> 6] >> (b & 63) & 1) != 0;
    };
    acc_.clear();
    unc_.clear();
    const uint64_t walk_start = pre_.work();
    pre_.run(s, acc_, unc_, {.first_bytes = same});
    const uint64_t walk = pre_.work() - walk_start + *key_work + static_cast<uint64_t>(words) +
                          from->accepted_ids.size() + from->uncertain_ranks.size();
    work_ += walk;
    auto mask = std::make_shared<StateMask>();
    if (!from->accepted_bits.empty()) {
      mask->accepted_bits = from->accepted_bits;
      for (int b = 0; b < 256; ++b) {  // the twin's tokens under the other first bytes go
        const int32_t n = root_child_[b];
        if (n < 0 || (same[b >> 6] >> (b & 63) & 1) || (t_keys_[b].a == 0 && t_keys_[b].b == 0)) continue;
        for (int32_t r = nodes[n].rank_begin; r < nodes[n].rank_end; ++r)
          mask->accepted_bits[sorted[r] >> 5] &= ~(1u << (sorted[r] & 31));
      }
      for (int32_t id : acc_) mask->accepted_bits[id >> 5] |= 1u << (id & 31);
      list_if_few(*mask, words);
    } else {
      accept_listed(*mask, *from, words, in_same);
    }
    return finish_derived(s, std::move(mask), *from, in_same, walk);
  }

  // Bits to a list when fewer than `words` tokens are accepted, as compute()
  // would store them (ORing a whole bitset per mask costs a microsecond).
  static void list_if_few(StateMask& mask, int32_t words) {
    size_t count = 0;
    for (uint32_t w : mask.accepted_bits) count += static_cast<size_t>(__builtin_popcount(w));
    if (count >= static_cast<size_t>(words)) return;
    for (int32_t w = 0; w < words; ++w)
      for (uint32_t bits = mask.accepted_bits[w]; bits != 0; bits &= bits - 1)
        mask.accepted_ids.push_back(w * 32 + __builtin_ctz(bits));
    std::vector<uint32_t>().swap(mask.accepted_bits);
  }

  // A derived mask's accepted tokens when its source's are a list: the
  // source's that `carried` keeps, with the walked acc_ (the two are
  // disjoint; left unsorted: the matcher only ORs them).
  template <class Carried>
  void accept_listed(StateMask& mask, const StateMask& from, int32_t words, const Carried& carried) {
    for (int32_t id : from.accepted_ids)
      if (carried(v_.token(id))) acc_.push_back(id);
    if (acc_.size() >= static_cast<size_t>(words)) {
      mask.accepted_bits.assign(words, 0);
      for (int32_t id : acc_) mask.accepted_bits[id >> 5] |= 1u << (id & 31);
    } else {
      mask.accepted_ids = acc_;
    }
  }

  // A derived mask's uncertain tokens, the source's that `carried` keeps and
  // the walked unc_ in rank order (the matcher walks them as a trie); then
  // the mask is kept as s's.
  template <class Carried>
  const StateMask* finish_derived(int32_t s, std::shared_ptr<StateMask> mask, const StateMask& from,
                                  const Carried& carried, uint64_t walk) {
    std::vector<int32_t> uncertain;
    for (int32_t r : from.uncertain_ranks)
      if (carried(v_.ranked(r))) uncertain.push_back(r);
    const size_t mid = uncertain.size();
    uncertain.insert(uncertain.end(), unc_.begin(), unc_.end());
    std::inplace_merge(uncertain.begin(), uncertain.begin() + static_cast<std::ptrdiff_t>(mid), uncertain.end());
    mask->uncertain_ranks = std::move(uncertain);
    mask->uncertain_lcp = uncertain_lcps(v_, mask->uncertain_ranks);
    keep(mask);
    pending_.emplace(key_of(s), SharedMask{mask, walk});
    if (eager_pass_done_) publish();
    return mask.get();
  }

  void init_root_children() {
    if (!root_child_.empty()) return;
    const auto& nodes = v_.trie_nodes();
    const auto& edges = v_.trie_edges();
    root_child_.assign(256, -1);
    for (int32_t e = nodes[0].kid_begin; e < nodes[0].kid_end; ++e) root_child_[edges[e].byte] = edges[e].node;
  }

  // The mask of s from its prefix twin t (Automaton::walk_class_offsets):
  // tokens of at most `twin_bytes_[s]` bytes are classified from s as from
  // t, so they are copied from t's mask, and only the longer ones are
  // walked. Near the bound of an unrolled repetition (`c{0,1024}`: the last
  // max-token-length copies each have their own mask) that walk is a small
  // part of the trie: from the copy with r characters left, only tokens
  // longer than r bytes can tell it from the far copies.
  const StateMask* derive(int32_t s) {
    const int32_t bytes = twin_bytes_[s];
    const int32_t twin = a_.rule_start[a_.states[s].rule] + twin_offset_[s];
    uint64_t twin_work = 0;
    const StateMask* from = shared(twin, &twin_work);
    if (from != nullptr)
      work_ += twin_work;
    else
      from = compute(twin);
    acc_.clear();
    unc_.clear();
    const uint64_t walk_start = pre_.work();
    pre_.run(s, acc_, unc_, {.longer_than = bytes});
    const int32_t words = v_.num_words();
    uint64_t walk = pre_.work() - walk_start + static_cast<uint64_t>(words) + from->accepted_ids.size() +
                    from->uncertain_ranks.size();
    work_ += walk;
    auto short_enough = [&](std::string_view t) { return static_cast<int32_t>(t.size()) <= bytes; };
    auto mask = std::make_shared<StateMask>();
    if (!from->accepted_bits.empty()) {
      const std::vector<uint32_t>& keep_bits = tokens_up_to(bytes);
      mask->accepted_bits.resize(words);
      for (int32_t w = 0; w < words; ++w) mask->accepted_bits[w] = from->accepted_bits[w] & keep_bits[w];
      for (int32_t id : acc_) mask->accepted_bits[id >> 5] |= 1u << (id & 31);
      list_if_few(*mask, words);  // few tokens left near the bound
    } else {
      accept_listed(*mask, *from, words, short_enough);
    }
    // Uncertain tokens: the twin's short ones and the walked long ones.
    return finish_derived(s, std::move(mask), *from, short_enough, walk);
  }

  // Bits of the token ids of at most `bytes` bytes (token_length_bits).
  // Not charged: what a mask is charged must not depend on which states
  // this compile computed before (a warm compile takes them from the cache).
  const std::vector<uint32_t>& tokens_up_to(int32_t bytes) { return token_length_bits(v_, bytes); }

  void publish() {
    SharedMaskCache& cache = shared_masks();
    std::lock_guard<std::mutex> lock(cache.mutex);
    for (auto& [key, entry] : pending_) {
      const size_t bytes = entry.mask->bytes();
      if (cache.bytes + bytes > SharedMaskCache::kMaxBytes) {
        cache.entries.clear();
        cache.bytes = 0;
      }
      if (cache.entries.emplace(key, entry).second) cache.bytes += bytes;
    }
    pending_.clear();
  }

  void keep(std::shared_ptr<const StateMask> m) {
    total_bytes_ += m->bytes();
    BRIOCHE_CHECK(total_bytes_ <= limits_.max_mask_bytes, "grammar compile exceeded its size budget of ",
                  limits_.max_mask_bytes, " bytes of mask tables");
    masks_.push_back(std::move(m));
  }

  const Automaton& a_;
  const Vocabulary& v_;
  CompileLimits limits_;
  FrontierDfa dfa_;
  StatePrecompute pre_;
  std::vector<Automaton::StructureHash> rule_hash_;
  std::vector<int32_t> twin_offset_, twin_bytes_;            // per state (derive); filled with class_offset_
  std::vector<int32_t> class_offset_;                        // per state (key_of)
  std::vector<int64_t> depth_;                               // per state (is_deep): bytes_into_string
  std::vector<Automaton::StructureHash> forward_;            // per state (key_of); {0, 0}: none
  std::unordered_map<Key128, bool, Key128Hash> small_walk_;  // walk_is_small per ShortWalkKeys::two_bytes
  std::vector<std::shared_ptr<const StateMask>> masks_;      // every mask this grammar uses
  std::vector<std::vector<int32_t>> accepted_of_;            // per masks_ entry computed here (rank order)
  std::unordered_map<uint64_t, std::vector<size_t>> by_hash_;
  std::unordered_set<const StateMask*> owned_;  // cache entries already in masks_
  std::vector<int32_t> acc_, unc_;
  std::vector<int32_t> root_child_;  // [256] trie node of each first byte, -1: none
  // First-byte twins: per state key (first_byte_keys), the first state
  // walked with it; keys of the DFA's stacks and configurations.
  std::unordered_map<Key128, FirstByteTwin, Key128Hash> first_byte_twins_;
  std::vector<Key128> node_key_, config_key_, frame_keys_;
  std::vector<int32_t> chain_;
  std::array<Key128, 256> s_keys_, t_keys_;
  size_t total_bytes_ = 0;
  uint64_t work_ = 0;
  std::unordered_map<SharedKey, SharedMask, SharedKeyHash> pending_;  // computed here, not yet published
  bool eager_pass_done_ = false;
  bool many_states_ = false;       // more than kManyStates automaton states
  std::vector<char> reading_;      // per rule: Automaton::rules_reading_before_return
  ShortWalkKeys short_walk_keys_;  // walk_is_small's cache key
};

CompiledGrammar::CompiledGrammar() = default;
CompiledGrammar::~CompiledGrammar() = default;

const StateMask* CompiledGrammar::compute_deferred(int32_t state) const {
  std::lock_guard<std::mutex> lock(builder_mutex_);
  const StateMask* m = state_mask_[state].load(std::memory_order_acquire);
  if (m != nullptr) return m;
  uint64_t walk_work = 0;  // not charged: the compile is over
  m = builder_->shared(state, &walk_work);
  if (m == nullptr) m = builder_->compute(state);
  state_mask_[state].store(m, std::memory_order_release);
  return m;
}

size_t CompiledGrammar::memory_bytes() const {
  const Automaton& a = automaton_;
  size_t names = 0;
  for (const std::string& n : a.rule_names) names += n.capacity() + sizeof(n);
  size_t bytes = sizeof(*this) + a.states.capacity() * sizeof(AutomatonState) +
                 a.byte_edges.capacity() * sizeof(ByteEdge) + a.rule_edges.capacity() * sizeof(RuleEdge) +
                 (a.rule_start.capacity() + a.rule_lookahead.capacity()) * sizeof(int32_t) + names +
                 a.states.size() * sizeof(std::atomic<const StateMask*>) + deferred_.capacity();
  std::lock_guard<std::mutex> lock(builder_mutex_);
  if (builder_) bytes += builder_->memory_bytes();
  return bytes;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar,
                                                                std::shared_ptr<const Vocabulary> vocabulary,
                                                                const CompileLimits& limits) {
  auto start = Clock::now();
  std::shared_ptr<CompiledGrammar> out;
  try {
    out = std::make_shared<CompiledGrammar>();
    build_into(*out, grammar, std::move(vocabulary), limits);
  } catch (...) {
    // Everything the failed compile built is freed here (its masks never
    // reached the process-wide cache); then the freed pages go back.
    const bool large = out && out->memory_bytes() >= kTrimAfterBytes;
    out.reset();
    if (large) release_free_memory();
    throw;
  }
  out->stats_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

void CompiledGrammar::build_into(CompiledGrammar& out_ref, const Grammar& grammar,
                                 std::shared_ptr<const Vocabulary> vocabulary, const CompileLimits& limits) {
  auto start = Clock::now();
  CompiledGrammar* out = &out_ref;
  AutomatonLimits automaton_limits = limits.automaton;
  automaton_limits.max_work = std::min(automaton_limits.max_work, limits.max_work);
  // Counted repetitions keep a written-out copy per byte of the longest
  // token next to their bounds: then no mask depends on a count.
  if (automaton_limits.counter_window == 0)
    automaton_limits.counter_window = std::max(1, vocabulary->max_token_length());
  // Sub-schemas repeated under different rule names become one rule first.
  out->automaton_ = Automaton::build(merge_equal_rules(grammar), automaton_limits);
  out->stats_.automaton_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out->vocabulary_ = std::move(vocabulary);
  const Automaton& a = out->automaton_;
  const Vocabulary& v = *out->vocabulary_;
  const int32_t num_states = static_cast<int32_t>(a.states.size());
  out->state_mask_ = std::make_unique<std::atomic<const StateMask*>[]>(num_states);
  for (int32_t s = 0; s < num_states; ++s) out->state_mask_[s].store(nullptr, std::memory_order_relaxed);
  out->deferred_.assign(num_states, 0);
  out->stats_.num_states = num_states;
  out->builder_ = std::make_unique<MaskBuilder>(a, v, limits);
  MaskBuilder& builder = *out->builder_;
  builder.charge(a.build_work + a.states.size() + a.byte_edges.size() + a.rule_edges.size());
  auto check_work = [&](int32_t states_done) {
    BRIOCHE_CHECK(builder.work() <= limits.max_work, "grammar compile exceeded its work budget of ", limits.max_work,
                  " units (", builder.work(), " spent with ", states_done, " of the automaton's ", num_states,
                  " states done); simplify the grammar or raise CompileLimits::max_work");
  };
  check_work(0);
  // An item rule's start whose every call site reads bytes too (its
  // one-byte characters) has no mask: those call sites stand in the same
  // frontier and their masks hold every token that starts in the call.
  std::vector<char> item_start_covered(a.rule_start.size(), 1);
  for (int32_t s = 0; s < num_states; ++s)
    for (uint32_t e = a.states[s].rule_begin; e < a.states[s].rule_end; ++e)
      if (a.rule_edges[e].rule >= a.first_item_rule && !a.has_byte_edges(s))
        item_start_covered[a.rule_edges[e].rule] = 0;
  for (int32_t s = 0; s < num_states; ++s) {
    if (!a.has_byte_edges(s)) continue;
    const int32_t rule = a.states[s].rule;
    if (a.is_lookahead_rule(rule)) continue;  // lookaheads are only matched, never masked
    if (rule >= a.first_item_rule && s == a.rule_start[rule] && item_start_covered[rule]) continue;
    ++out->stats_.num_scannable_states;
    // Deferral is decided before the caches are asked, so that what a state
    // is charged does not depend on what other grammars compiled before.
    // A small state is charged its deferral check only (taken from a cache
    // when there, else left to the first mask that needs it); any other
    // state is charged its walk, computed or not.
    // States whose masks derive from an earlier state's (prefix or
    // first-byte twins) are deferred the same way, charged their checks.
    uint64_t walk_work = 0;
    const StateMask* m = nullptr;
    if (limits.defer_tokens > 0 &&
        (builder.has_prefix_twin(s) || builder.is_deep(s) ||
         builder.walk_is_small(s, builder.small_walk_limit(limits.defer_tokens)) || builder.has_first_byte_twin(s))) {
      m = builder.shared(s, &walk_work);
      if (m != nullptr) {
        ++out->stats_.num_shared_states;
      } else {
        out->deferred_[s] = 1;
        ++out->stats_.num_deferred_states;
        out->stats_.num_deep_states += builder.is_deep(s) && !builder.has_prefix_twin(s);
      }
    } else if ((m = builder.shared(s, &walk_work)) != nullptr) {
      builder.charge(walk_work);
      builder.note_shared(s);
      ++out->stats_.num_shared_states;
    } else {
      m = builder.compute(s);
    }
    out->state_mask_[s].store(m, std::memory_order_relaxed);
    check_work(s + 1);
  }
  builder.end_eager_pass();
  out->stats_.num_distinct_masks = builder.num_masks();
  out->stats_.mask_bytes = builder.total_bytes();
  out->stats_.work = builder.work();
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, GrammarCacheOptions options)
    : vocabulary_(std::move(vocabulary)), options_(options) {
  if (options_.prewarm) prewarm_shared_masks(vocabulary_);
}

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
  std::shared_ptr<const CompiledGrammar> compiled = CompiledGrammar::compile(grammar, vocabulary_, options_.limits);
  // Measured outside the lock: memory_bytes() takes each grammar's builder lock.
  const size_t compiled_bytes = compiled->memory_bytes();
  std::vector<std::shared_ptr<const CompiledGrammar>> entries;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    if (compiled_bytes > options_.max_bytes) return compiled;  // usable, but not kept
    for (const Entry& e : lru_) entries.push_back(e.second);
  }
  // Entries grow while they are used (deferred states, DFA configurations):
  // measure them again, then evict least recently used ones to the budgets.
  std::unordered_map<const CompiledGrammar*, size_t> measured;
  for (const auto& e : entries) measured[e.get()] = e->memory_bytes();
  entries.clear();
  std::vector<std::shared_ptr<const CompiledGrammar>> evicted;  // released outside the lock
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    bytes_ = 0;
    for (const Entry& e : lru_) {
      auto m = measured.find(e.second.get());
      bytes_ += e.second == compiled ? compiled_bytes : m != measured.end() ? m->second : 0;
    }
    while (lru_.size() > 1 && (lru_.size() > options_.max_entries || bytes_ > options_.max_bytes)) {
      auto m = measured.find(lru_.back().second.get());
      bytes_ -= std::min(bytes_, m != measured.end() ? m->second : 0);
      index_.erase(lru_.back().first);
      evicted.push_back(std::move(lru_.back().second));
      lru_.pop_back();
    }
  }
  size_t evicted_bytes = 0;
  for (const auto& e : evicted) evicted_bytes += measured.count(e.get()) ? measured[e.get()] : 0;
  evicted.clear();  // freed here unless a request still holds one
  if (evicted_bytes >= kTrimAfterBytes) release_free_memory();
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

void GrammarCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lru_.clear();
  index_.clear();
  bytes_ = 0;
}

}  // namespace brioche::grammar
