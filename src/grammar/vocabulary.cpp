#include "grammar/vocabulary.h"

#include <algorithm>

#include "core/error.h"

namespace brioche::grammar {

namespace {

// well_formed[d] = 1 when t[d..] is a sequence of whole UTF-8 characters
// (ASCII, or U+0080..U+10FFFF without overlong forms, surrogates allowed),
// the last one possibly cut off by the end of t.
void utf8_rests_well_formed(const std::string& t, std::vector<uint8_t>& well_formed) {
  const size_t n = t.size();
  well_formed.assign(n + 1, 0);
  well_formed[n] = 1;
  for (size_t i = n; i-- > 0;) {
    const uint8_t b = static_cast<uint8_t>(t[i]);
    if (b < 0x80) {
      well_formed[i] = well_formed[i + 1];
      continue;
    }
    // Continuation ranges of a sequence led by b.
    uint8_t lo[3] = {0x80, 0x80, 0x80}, hi[3] = {0xBF, 0xBF, 0xBF};
    size_t len;
    if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b >= 0xE0 && b <= 0xEF)
      len = 3;
    else if (b >= 0xF0 && b <= 0xF4)
      len = 4;
    else
      continue;  // a continuation byte or an invalid lead here: not well-formed
    if (b == 0xE0) lo[0] = 0xA0;
    if (b == 0xF0) lo[0] = 0x90;
    if (b == 0xF4) hi[0] = 0x8F;
    size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      const uint8_t c = static_cast<uint8_t>(t[i + k]);
      if (c < lo[k - 1] || c > hi[k - 1]) break;
    }
    if (i + k == n)
      well_formed[i] = 1;  // cut off (or ended) at the token's end
    else if (k == len)
      well_formed[i] = well_formed[i + k];
  }
}

}  // namespace

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

  // Trie: token r adds nodes for its prefixes longer than its LCP with
  // token r-1 (none when it equals r-1). Children are then grouped per
  // parent; pre-order creation keeps each child list sorted by byte.
  trie_nodes_.push_back(TrieNode{0, static_cast<int32_t>(sorted_ids_.size()), 0, 0, 0});
  std::vector<int32_t> parent{-1};
  std::vector<uint8_t> last_byte{0};
  std::vector<int32_t> path{0};  // path[d]: node of depth d on the current token
  std::vector<uint16_t> depth{0};
  trie_utf8_below_.push_back(1);
  std::vector<uint8_t> well_formed;  // [token length + 1]: the token's rest from d is well-formed UTF-8
  for (size_t r = 0; r < sorted_ids_.size(); ++r) {
    const std::string& t = tokens_[sorted_ids_[r]];
    const size_t l = lcp_prev_[r];
    max_token_length_ = std::max<int32_t>(max_token_length_, static_cast<int32_t>(t.size()));
    path.resize(l + 1);
    if (r > 0 && l == t.size()) {
      ++trie_nodes_[path[l]].num_exact;  // same bytes as the previous id
      continue;
    }
    for (size_t d = l + 1; d <= t.size(); ++d) {
      const int32_t id = static_cast<int32_t>(trie_nodes_.size());
      trie_nodes_.push_back(TrieNode{static_cast<int32_t>(r), 0, d == t.size() ? 1 : 0, 0, 0});
      trie_utf8_below_.push_back(1);
      parent.push_back(path[d - 1]);
      depth.push_back(static_cast<uint16_t>(d));
      last_byte.push_back(static_cast<uint8_t>(t[d - 1]));
      path.push_back(id);
    }
    utf8_rests_well_formed(t, well_formed);
    for (size_t d = 0; d <= t.size(); ++d) trie_utf8_below_[path[d]] &= well_formed[d];
  }
  // rank_end: the next node in pre-order outside the subtree starts there;
  // computed backwards as max over children.
  for (size_t i = trie_nodes_.size(); i-- > 1;) {
    TrieNode& n = trie_nodes_[i];
    n.rank_end = std::max(n.rank_end, n.rank_begin + n.num_exact);
    TrieNode& p = trie_nodes_[parent[i]];
    p.rank_end = std::max(p.rank_end, n.rank_end);
  }
  // Bytes below each node, children before parents (a child's id is larger).
  trie_bytes_below_.assign(trie_nodes_.size(), ByteSet{0, 0, 0, 0});
  for (size_t i = trie_nodes_.size(); i-- > 1;) {
    ByteSet& p = trie_bytes_below_[parent[i]];
    const ByteSet& own = trie_bytes_below_[i];
    for (int w = 0; w < 4; ++w) p[w] |= own[w];
    p[last_byte[i] >> 6] |= 1ull << (last_byte[i] & 63);
  }
  trie_longest_below_.assign(trie_nodes_.size(), 0);
  for (size_t i = trie_nodes_.size(); i-- > 1;) {
    if (trie_nodes_[i].num_exact > 0) trie_longest_below_[i] = std::max(trie_longest_below_[i], depth[i]);
    trie_longest_below_[parent[i]] = std::max(trie_longest_below_[parent[i]], trie_longest_below_[i]);
  }
  std::vector<int32_t> num_kids(trie_nodes_.size() + 1, 0);
  for (size_t i = 1; i < trie_nodes_.size(); ++i) ++num_kids[parent[i] + 1];
  for (size_t i = 0; i < trie_nodes_.size(); ++i) num_kids[i + 1] += num_kids[i];
  trie_edges_.resize(trie_nodes_.size() - 1);
  for (size_t i = 0; i < trie_nodes_.size(); ++i) {
    trie_nodes_[i].kid_begin = trie_nodes_[i].kid_end = num_kids[i];
  }
  for (size_t i = 1; i < trie_nodes_.size(); ++i)
    trie_edges_[trie_nodes_[parent[i]].kid_end++] = TrieEdge{last_byte[i], static_cast<int32_t>(i)};

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

  // Ids by last byte (counting sort): what can end a uniqueItems item.
  last_byte_begin_.assign(257, 0);
  for (int32_t id : sorted_ids_) ++last_byte_begin_[static_cast<uint8_t>(tokens_[id].back()) + 1];
  for (int b = 0; b < 256; ++b) last_byte_begin_[b + 1] += last_byte_begin_[b];
  last_byte_ids_.resize(sorted_ids_.size());
  std::vector<int32_t> fill(last_byte_begin_.begin(), last_byte_begin_.end() - 1);
  for (int32_t id = 0; id < n; ++id)
    if (!special_[id]) last_byte_ids_[fill[static_cast<uint8_t>(tokens_[id].back())]++] = id;
}

}  // namespace brioche::grammar
