#include "grammar/vocabulary.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, VocabularyOptions options)
    : tokens_(std::move(token_bytes)), eos_ids_(std::move(options.eos_ids)) {
  int32_t n = static_cast<int32_t>(tokens_.size());
  mask_vocab_size_ = options.mask_vocab_size > 0 ? options.mask_vocab_size : n;
  BRIOCHE_CHECK(mask_vocab_size_ >= n, "vocabulary: mask_vocab_size ", mask_vocab_size_,
                " is smaller than the number of tokens ", n);
  special_.assign(n, 0);
  for (int32_t id : options.special_ids) {
    BRIOCHE_CHECK(id >= 0 && id < n, "vocabulary: special id ", id, " out of range [0, ", n, ")");
    special_[id] = 1;
  }
  for (int32_t id : eos_ids_) {
    BRIOCHE_CHECK(id >= 0 && id < n, "vocabulary: eos id ", id, " out of range [0, ", n, ")");
    special_[id] = 1;  // an EOS id is never a text token
  }
  for (int32_t id = 0; id < n; ++id) {
    if (tokens_[id].empty()) special_[id] = 1;  // nothing to match: treated as special
    BRIOCHE_CHECK(tokens_[id].size() < 65535, "vocabulary: token ", id, " is ", tokens_[id].size(),
                  " bytes long; at most 65534 supported");
    if (!special_[id]) sorted_ids_.push_back(id);
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(),
            [&](int32_t a, int32_t b) { return tokens_[a] != tokens_[b] ? tokens_[a] < tokens_[b] : a < b; });
  lcp_prev_.assign(sorted_ids_.size(), 0);
  for (size_t r = 1; r < sorted_ids_.size(); ++r) {
    const std::string& a = tokens_[sorted_ids_[r - 1]];
    const std::string& b = tokens_[sorted_ids_[r]];
    size_t l = 0, m = std::min(a.size(), b.size());
    while (l < m && a[l] == b[l]) ++l;
    lcp_prev_[r] = static_cast<uint16_t>(l);
  }
  first_rank_of_byte_.assign(257, static_cast<int32_t>(sorted_ids_.size()));
  for (int32_t r = static_cast<int32_t>(sorted_ids_.size()) - 1; r >= 0; --r)
    first_rank_of_byte_[static_cast<unsigned char>(tokens_[sorted_ids_[r]][0])] = r;
  for (int b = 255; b >= 0; --b)
    first_rank_of_byte_[b] = std::min(first_rank_of_byte_[b], first_rank_of_byte_[b + 1]);

  uint64_t h = 1469598103934665603ull;
  auto mix = [&](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
  for (int32_t id = 0; id < n; ++id) {
    for (unsigned char c : tokens_[id]) mix(c);
    mix(0xFF);
    mix(special_[id] ? 1 : 0);
  }
  for (int32_t id : eos_ids_)
    for (int k = 0; k < 4; ++k) mix(static_cast<unsigned char>(id >> (8 * k)));
  h ^= static_cast<uint64_t>(mask_vocab_size_) * 0x9e3779b97f4a7c15ull;
  hash_ = h;
}

}  // namespace brioche::grammar
