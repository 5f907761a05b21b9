#include "engine/constraint.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {

SequenceConstraint::SequenceConstraint(const GrammarConstraint& constraint)
    : matcher_(constraint.compiled),
      reasoning_close_(constraint.reasoning_close),
      reasoning_open_token_(constraint.reasoning_open_token) {
  BRIOCHE_CHECK(constraint.compiled != nullptr, "SequenceConstraint: expected a compiled grammar, got null");
  bool has_close = !reasoning_close_.empty();
  BRIOCHE_CHECK(has_close || (!constraint.starts_in_reasoning && reasoning_open_token_ < 0),
                "SequenceConstraint: a reasoning block needs its close tag (reasoning_close is empty)");
  if (constraint.starts_in_reasoning)
    phase_ = Phase::InReasoning;
  else if (reasoning_open_token_ >= 0)
    phase_ = Phase::MayOpenReasoning;
  mask_.assign(size_t(matcher_.mask_words()), 0);
}

const uint32_t* SequenceConstraint::next_mask(bool* any_allowed) {
  *any_allowed = true;
  if (phase_ == Phase::InReasoning) return nullptr;
  matcher_.fill_next_token_bitmask(mask_.data());
  if (phase_ == Phase::MayOpenReasoning) {
    int32_t t = reasoning_open_token_;
    if (t < int32_t(mask_.size()) * 32) mask_[size_t(t) >> 5] |= 1u << (t & 31);
  }
  *any_allowed = std::any_of(mask_.begin(), mask_.end(), [](uint32_t w) { return w != 0; });
  return mask_.data();
}

bool SequenceConstraint::accept(int32_t token, std::string_view bytes) {
  if (phase_ == Phase::MayOpenReasoning) {
    if (token == reasoning_open_token_) {
      phase_ = Phase::InReasoning;
      return true;
    }
    phase_ = Phase::Active;  // the model answered directly
  }
  if (phase_ == Phase::InReasoning) {
    // Search the close tag in the tail + this token; keep only what could
    // still be the start of a tag split across tokens.
    reasoning_tail_.append(bytes);
    size_t at = reasoning_tail_.find(reasoning_close_);
    if (at == std::string::npos) {
      size_t keep = std::min(reasoning_tail_.size(), reasoning_close_.size() - 1);
      reasoning_tail_.erase(0, reasoning_tail_.size() - keep);
      return true;
    }
    std::string after = reasoning_tail_.substr(at + reasoning_close_.size());
    reasoning_tail_.clear();
    phase_ = Phase::Active;
    if (!after.empty() && !matcher_.accept_bytes(after)) ++rejected_;
    return true;
  }
  if (matcher_.accept_token(token)) return true;
  ++rejected_;
  return false;
}

int32_t SequenceConstraint::allowed_prefix(std::span<const int32_t> drafts) {
  if (phase_ != Phase::Active) return int32_t(drafts.size());
  int32_t n = 0;
  for (int32_t token : drafts) {
    if (matcher_.is_terminated() || !matcher_.accept_token(token)) break;
    ++n;
  }
  matcher_.rollback(n);
  return n;
}

const uint32_t* SequenceConstraint::draft_mask(bool* any_allowed) {
  *any_allowed = true;
  if (phase_ != Phase::Active) return nullptr;
  if (matcher_.is_terminated()) {
    *any_allowed = false;
    return nullptr;
  }
  draft_mask_.resize(size_t(matcher_.mask_words()));
  matcher_.fill_next_token_bitmask(draft_mask_.data());
  *any_allowed = std::any_of(draft_mask_.begin(), draft_mask_.end(), [](uint32_t w) { return w != 0; });
  return draft_mask_.data();
}

bool SequenceConstraint::advance_draft(int32_t token) {
  if (phase_ != Phase::Active) return true;
  if (matcher_.is_terminated() || !matcher_.accept_token(token)) return false;
  ++draft_steps_;
  return true;
}

void SequenceConstraint::rollback_drafts() {
  matcher_.rollback(draft_steps_);
  draft_steps_ = 0;
}

std::string SequenceConstraint::forced_continuation() {
  if (!active() || matcher_.is_terminated()) return {};
  return matcher_.find_jump_forward_string();
}

int32_t SequenceConstraint::sole_allowed_token() {
  if (!active()) return -1;
  return matcher_.sole_allowed_token(mask_.data());
}

std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const tokenizer::Tokenizer& tokenizer,
                                                              int32_t mask_vocab_size) {
  int32_t n = std::min(tokenizer.vocab_size(), mask_vocab_size);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  grammar::VocabularyOptions options;
  options.mask_vocab_size = mask_vocab_size;
  for (int32_t id = 0; id < n; ++id) {
    bytes[size_t(id)] = tokenizer.token_bytes(id);
    if (tokenizer.is_special(id)) options.special_ids.push_back(id);
  }
  for (int32_t id : tokenizer.eos_ids())
    if (id >= 0 && id < n) options.eos_ids.push_back(id);
  return std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::move(options));
}

}  // namespace brioche::engine
