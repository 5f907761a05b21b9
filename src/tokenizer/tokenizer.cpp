#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {

// ---- TokenizerImpl ------------------------------------------------------

void TokenizerImpl::finish() {
  const size_t n = token_texts.size();
  BRIOCHE_CHECK(token_bytes.size() == n && special.size() == n, "tokenizer: table sizes differ: texts ", n, ", bytes ",
                token_bytes.size(), ", special ", special.size());
  matcher_.build(added_tokens);
  text_to_id_.reserve(n);
  for (const AddedToken& t : added_tokens) text_to_id_.emplace(t.content, t.id);
  for (size_t id = 0; id < n; ++id)
    if (!token_texts[id].empty()) text_to_id_.emplace(token_texts[id], static_cast<int32_t>(id));
  if (eos_ids.empty()) eos_ids = find_end_of_generation_tokens(*this);
}

std::optional<int32_t> TokenizerImpl::find_token(std::string_view text) const {
  auto it = text_to_id_.find(text);
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

void TokenizerImpl::check_id(int32_t id) const {
  BRIOCHE_CHECK(id >= 0 && static_cast<size_t>(id) < token_texts.size(), "tokenizer: token id ", id,
                " is out of range [0, ", token_texts.size(), ")");
}

void TokenizerImpl::encode_piece(std::string_view piece, bool starts_input, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  thread_local Words words;
  if (normalizer.empty()) {
    pre_tokenizer.run(piece, starts_input, words);
  } else {
    const std::string normalized = normalizer.apply(piece);
    pre_tokenizer.run(normalized, starts_input, words);
  }
  for (const auto& [begin, end] : words.ranges)
    model->encode_word(std::string_view(words.text).substr(begin, end - begin), out);
}

std::vector<int32_t> TokenizerImpl::encode(std::string_view input, const EncodeOptions& opts) const {
  // Hugging Face takes Rust strings, which are valid UTF-8; do the same.
  std::string repaired;
  if (!is_valid_utf8(input)) {
    repaired = utf8_lossy(input);
    input = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(input.size() / 3 + 4);
  if (opts.add_special && add_bos && bos_id >= 0) out.push_back(bos_id);
  size_t pos = 0;
  AddedTokenMatch match;
  while (pos < input.size()) {
    if (!matcher_.find(input, pos, opts.parse_special, match)) break;
    encode_piece(input.substr(pos, match.begin - pos), pos == 0, out);
    out.push_back(match.id);
    pos = match.end;
  }
  encode_piece(input.substr(pos), pos == 0, out);
  return out;
}

std::string TokenizerImpl::decode(std::span<const int32_t> ids, const DecodeOptions& opts) const {
  std::string bytes;
  for (int32_t id : ids) {
    check_id(id);
    if (opts.skip_special && special[id]) continue;
    bytes += token_bytes[id];
  }
  size_t strip = 0;
  while (strip < static_cast<size_t>(decoder.strip_leading_spaces) && strip < bytes.size() && bytes[strip] == ' ')
    ++strip;
  return utf8_lossy(std::string_view(bytes).substr(strip));
}

std::vector<int32_t> find_end_of_generation_tokens(const TokenizerImpl& impl) {
  std::vector<int32_t> ids;
  if (impl.eos_id >= 0) ids.push_back(impl.eos_id);
  static const char* const kNames[] = {"<|im_end|>",    "<|eot_id|>",    "<|eom_id|>", "<|end_of_text|>",
                                       "<|endoftext|>", "<end_of_turn>", "<|end|>",    "</s>",
                                       "<eos>",         "<|return|>",    "<|call|>"};
  for (const char* name : kNames)
    if (auto id = impl.find_token(name); id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  return ids;
}

// ---- Tokenizer ----------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions opts) const {
  return impl_->encode(text, opts);
}
std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeOptions opts) const {
  return impl_->decode(ids, opts);
}
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_texts.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->token_texts[id];
}
std::string Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  return impl_->token_bytes[id];
}
bool Tokenizer::is_special(int32_t id) const {
  impl_->check_id(id);
  return impl_->special[id] != 0;
}
std::optional<int32_t> Tokenizer::token_id(std::string_view text) const { return impl_->find_token(text); }

// ---- StreamingDetokenizer -------------------------------------------------

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions opts)
    : tokenizer_(tokenizer), opts_(opts) {}

std::string StreamingDetokenizer::push(int32_t id) {
  const TokenizerImpl& impl = tokenizer_.impl();
  impl.check_id(id);
  if (opts_.skip_special && impl.special[id]) return {};
  std::string_view bytes = impl.token_bytes[id];
  if (at_start_ && !bytes.empty()) {
    // Same leading-space rule as decode(): it applies to the start of the text.
    size_t strip = 0;
    while (strip < static_cast<size_t>(impl.decoder.strip_leading_spaces) && strip < bytes.size() &&
           bytes[strip] == ' ')
      ++strip;
    bytes.remove_prefix(strip);
    at_start_ = false;
  }
  pending_.append(bytes);
  const size_t ready = complete_utf8_prefix(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace brioche::tokenizer
