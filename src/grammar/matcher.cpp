#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace brioche::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled, MatcherOptions options)
    : compiled_(std::move(compiled)), options_(options), walker_(compiled_->automaton(), arena_) {
  BRIOCHE_CHECK(compiled_ != nullptr, "GrammarMatcher: compiled grammar is null");
  if (compiled_->automaton().has_unique_items) {
    items_ = std::make_unique<UniqueItems>();
    walker_.set_unique_items(items_.get());
  }
  reset();
}

void GrammarMatcher::reset() {
  arena_.truncate(0);
  history_.clear();
  dropped_steps_ = 0;
  if (items_) items_->reset();
  const Automaton& a = compiled_->automaton();
  int32_t root = arena_.intern(a.rule_start[a.root_rule], kRootEnd);
  Frontier f;
  walker_.closure_of(root, f);
  history_.push_back(Step{std::move(f), arena_.size(), false, items_ ? items_->mark() : UniqueItems::Mark{}});
}

void GrammarMatcher::push(Frontier f, bool eos) {
  history_.push_back(Step{std::move(f), arena_.size(), eos, items_ ? items_->mark() : UniqueItems::Mark{}});
  if (options_.max_rollback_tokens >= 0 && static_cast<int32_t>(history_.size()) > options_.max_rollback_tokens + 1) {
    history_.erase(history_.begin());
    ++dropped_steps_;
  }
}

bool GrammarMatcher::can_terminate() const { return !history_.back().eos && current().completed; }

bool GrammarMatcher::is_terminated() const {
  if (history_.back().eos) return true;
  return current().completed && current().nodes.empty();
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (history_.back().eos) return false;
  int32_t checkpoint = arena_.size();
  Frontier f;
  if (!read_bytes(bytes, f)) {
    arena_.truncate(checkpoint);
    if (items_) items_->rollback(history_.back().items);
    return false;
  }
  push(std::move(f), false);
  return true;
}

bool GrammarMatcher::read_bytes(std::string_view bytes, Frontier& out) {
  const int32_t base = text_size();
  out = current();
  Frontier next;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<uint8_t>(bytes[i]);
    if (items_) items_->put(base + static_cast<int32_t>(i), c);
    walker_.advance(out, c, next);
    if (next.nodes.empty() && !next.completed) return false;
    std::swap(out, next);
  }
  return true;
}

bool GrammarMatcher::can_read(std::string_view bytes) {
  Frontier f;
  return read_bytes(bytes, f);
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const Vocabulary& v = compiled_->vocabulary();
  BRIOCHE_CHECK(token_id >= 0 && token_id < v.size(), "GrammarMatcher: token id ", token_id, " out of range [0, ",
                v.size(), ")");
  if (history_.back().eos) return false;
  const auto& eos = v.eos_ids();
  if (std::find(eos.begin(), eos.end(), token_id) != eos.end()) {
    if (!can_terminate()) return false;
    push(current(), true);
    return true;
  }
  // Padded ids past the tokenizer's vocabulary and special tokens never match.
  if (token_id >= v.num_tokens() || v.is_special(token_id)) return false;
  return accept_bytes(v.token(token_id));
}

void GrammarMatcher::rollback(int32_t n) {
  BRIOCHE_CHECK(n >= 0 && n < static_cast<int32_t>(history_.size()), "GrammarMatcher::rollback(", n, "): only ",
                history_.size() - 1, " steps can be undone");
  for (int32_t i = 0; i < n; ++i) history_.pop_back();
  arena_.truncate(history_.back().arena_size);
  if (items_) items_->rollback(history_.back().items);
}

void GrammarMatcher::check_uncertain(int32_t node, const StateMask& m, uint32_t* mask) {
  const Vocabulary& v = compiled_->vocabulary();
  const auto& sorted = v.sorted_ids();
  const size_t count = m.uncertain_ranks.size();
  if (scratch_.empty()) scratch_.resize(64);
  // From the node and the frontier's item-rule stacks, as the mask
  // compiler walked the node's state with its calls: a token may start
  // inside a length bound's item rule the node calls (whose start has no
  // mask of its own: its call sites hold its tokens), then leave the rule.
  // Every stack walked is a current one, so no token outside the grammar
  // gets in. (Not the node's closure again: re-entering it would repeat
  // uniqueItems' item starts and ends.)
  scratch_[0].clear();
  scratch_[0].nodes.push_back(node);
  for (int32_t item : item_nodes_)
    if (item != node) scratch_[0].nodes.push_back(item);
  const int32_t base = text_size();
  int32_t valid = 0;
  size_t j = 0;
  while (j < count) {
    if (j > 0) valid = std::min<int32_t>(valid, m.uncertain_lcp[j]);
    const int32_t rank = m.uncertain_ranks[j];
    const int32_t id = sorted[rank];
    if (mask[id >> 5] & (1u << (id & 31))) {  // already allowed by another stack
      ++j;
      continue;
    }
    std::string_view tok = v.ranked(rank);
    const int32_t len = static_cast<int32_t>(tok.size());
    if (scratch_.size() < static_cast<size_t>(len) + 1) scratch_.resize(len + 1);
    int32_t k = valid;
    bool dead = false;
    while (k < len) {
      if (items_) items_->put(base + k, static_cast<uint8_t>(tok[k]));
      walker_.advance(scratch_[k], static_cast<uint8_t>(tok[k]), scratch_[k + 1]);
      ++k;
      if (scratch_[k].nodes.empty()) {
        dead = true;
        break;
      }
    }
    valid = k;
    if (!dead) {
      mask[id >> 5] |= 1u << (id & 31);
      ++j;
      continue;
    }
    // No stack survives these k bytes: only a token ending exactly here and
    // completing the grammar is allowed; skip the rest of the subtree.
    const bool complete_here = scratch_[k].completed;
    if (len == k && complete_here) mask[id >> 5] |= 1u << (id & 31);
    ++j;
    while (j < count && m.uncertain_lcp[j] >= k) {
      if (complete_here && static_cast<int32_t>(v.ranked(m.uncertain_ranks[j]).size()) == k) {
        int32_t other = sorted[m.uncertain_ranks[j]];
        mask[other >> 5] |= 1u << (other & 31);
      }
      ++j;
    }
  }
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* mask) {
  const Vocabulary& v = compiled_->vocabulary();
  const int32_t words = v.num_words();
  std::memset(mask, 0, sizeof(uint32_t) * words);
  if (history_.back().eos) return;
  const Frontier& f = current();
  const int32_t checkpoint = arena_.size();
  seen_states_.clear();
  // Context-independent part: OR of each distinct state's accepted set.
  for (int32_t node : f.nodes) {
    int32_t s = arena_.node(node).state;
    if (std::find(seen_states_.begin(), seen_states_.end(), s) != seen_states_.end()) continue;
    seen_states_.push_back(s);
    const StateMask* m = compiled_->mask_of_state(s);
    if (!m) continue;
    if (!m->accepted_bits.empty()) {
      const uint32_t* bits = m->accepted_bits.data();
      for (int32_t w = 0; w < words; ++w) mask[w] |= bits[w];
    } else {
      for (int32_t id : m->accepted_ids) mask[id >> 5] |= 1u << (id & 31);
    }
  }
  // Context-dependent part: tokens that leave their rule mid-token.
  const Automaton& a = compiled_->automaton();
  item_nodes_.clear();
  for (int32_t node : f.nodes)
    if (a.states[arena_.node(node).state].rule >= a.first_item_rule) item_nodes_.push_back(node);
  for (int32_t node : f.nodes) {
    const StateMask* m = compiled_->mask_of_state(arena_.node(node).state);
    if (m && !m->uncertain_ranks.empty()) check_uncertain(node, *m, mask);
  }
  if (items_ != nullptr) {
    items_->rollback(history_.back().items);  // the text and values of the walks above
    drop_repeated_items(f, mask);
    items_->rollback(history_.back().items);
  }
  if (f.completed)
    for (int32_t id : v.eos_ids()) mask[id >> 5] |= 1u << (id & 31);
  arena_.truncate(checkpoint);
}

// A state's accepted tokens include those that end its rule exactly at the
// token's end (any caller takes a return). Where returning from there, with
// no byte read, ends a uniqueItems item, the item must also be new: such a
// token writes the item's last byte, so it ends with `"` (a string), `}`,
// `]`, a digit, `e` (true/false) or `l` (null), of a kind an earlier value
// of that array has. Those tokens whose item would repeat an earlier value
// are read again from all the stacks (another stack may still take them).
// Tokens that end an item before their last byte are uncertain already
// (the mask compiler stops at item ends: state_walk.h) and were checked.
void GrammarMatcher::drop_repeated_items(const Frontier& f, uint32_t* mask) {
  const Automaton& a = compiled_->automaton();
  const Vocabulary& v = compiled_->vocabulary();
  items_in_progress_.clear();
  for (int32_t node : f.nodes) {
    for (int32_t p = arena_.node(node).parent; p >= 0;) {
      const StackNode& q = arena_.node(p);
      if (q.unique < 0) {
        if (std::find(items_in_progress_.begin(), items_in_progress_.end(), q.unique) == items_in_progress_.end())
          items_in_progress_.push_back(q.unique);
        break;
      }
      if (!a.states[q.state].accepting) break;
      p = q.parent;
    }
  }
  repeat_candidates_.clear();
  const int32_t written = text_size();
  for (int32_t item : items_in_progress_) {
    uint32_t kinds = items_->seen_kinds(item);
    const int32_t start = items_->start_of(item);
    if (start < written) kinds &= UniqueItems::kind_bit(items_->text()[start]);
    for (int b = 0; b < 256 && kinds != 0; ++b) {
      const bool last_byte = ((kinds & UniqueItems::kind_bit('"')) && b == '"') ||
                             ((kinds & UniqueItems::kind_bit('{')) && b == '}') ||
                             ((kinds & UniqueItems::kind_bit('[')) && b == ']') ||
                             ((kinds & UniqueItems::kind_bit('0')) && b >= '0' && b <= '9') ||
                             ((kinds & (UniqueItems::kind_bit('t') | UniqueItems::kind_bit('f'))) && b == 'e') ||
                             ((kinds & UniqueItems::kind_bit('n')) && b == 'l');
      if (!last_byte) continue;
      for (int32_t id : v.ids_ending_with(static_cast<uint8_t>(b)))
        if ((mask[id >> 5] >> (id & 31) & 1) && items_->repeats(item, v.token(id))) repeat_candidates_.push_back(id);
    }
  }
  std::sort(repeat_candidates_.begin(), repeat_candidates_.end());
  repeat_candidates_.erase(std::unique(repeat_candidates_.begin(), repeat_candidates_.end()), repeat_candidates_.end());
  for (int32_t id : repeat_candidates_)
    if (!can_read(v.token(id))) mask[id >> 5] &= ~(1u << (id & 31));
}

int32_t GrammarMatcher::sole_allowed_token(uint32_t* mask) {
  if (history_.back().eos) return -1;
  const Frontier& f = current();
  if (f.completed || f.nodes.empty()) return -1;  // EOS allowed, or nothing
  // Cheap exit: a state that accepts two tokens on its own, whatever the
  // stack (with uniqueItems the mask may drop some of them: always filled).
  for (int32_t node : f.nodes) {
    if (items_) break;
    const StateMask* m = compiled_->mask_of_state(arena_.node(node).state);
    if (m && (!m->accepted_bits.empty() || m->accepted_ids.size() >= 2)) return -1;
  }
  fill_next_token_bitmask(mask);
  const int32_t words = mask_words();
  int32_t token = -1;
  for (int32_t w = 0; w < words; ++w) {
    if (mask[w] == 0) continue;
    if (token >= 0 || (mask[w] & (mask[w] - 1)) != 0) return -1;
    token = w * 32 + __builtin_ctz(mask[w]);
  }
  return token;
}

std::string GrammarMatcher::find_jump_forward_string() {
  std::string out;
  if (is_terminated()) return out;
  const int32_t checkpoint = arena_.size();
  const int32_t base = text_size();
  Frontier cur = current(), next;
  for (int guard = 0; guard < 4096; ++guard) {
    if (cur.completed) break;
    uint64_t bits[4];
    walker_.next_bytes(cur, bits);
    int count = 0, byte = -1;
    for (int w = 0; w < 4; ++w) {
      count += __builtin_popcountll(bits[w]);
      if (bits[w]) byte = w * 64 + __builtin_ctzll(bits[w]);
    }
    if (count != 1) break;
    if (items_) items_->put(base + guard, static_cast<uint8_t>(byte));
    walker_.advance(cur, static_cast<uint8_t>(byte), next);
    if (next.nodes.empty() && !next.completed) break;  // the byte would repeat a uniqueItems item
    out += static_cast<char>(byte);
    std::swap(cur, next);
  }
  arena_.truncate(checkpoint);
  if (items_) items_->rollback(history_.back().items);
  // Do not end inside a UTF-8 sequence: drop an incomplete trailing character.
  size_t end = out.size(), i = end;
  while (i > 0 && (static_cast<unsigned char>(out[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) {
    unsigned char lead = static_cast<unsigned char>(out[i - 1]);
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (end - (i - 1) < need) out.resize(i - 1);
  }
  return out;
}

}  // namespace brioche::grammar
