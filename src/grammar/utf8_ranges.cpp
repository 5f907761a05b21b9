// Character classes as UTF-8 byte-range sequences (see utf8_ranges.h).
#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace brioche::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

void encode(uint32_t cp, int len, uint8_t* out) {
  if (len == 1) {
    out[0] = static_cast<uint8_t>(cp);
  } else if (len == 2) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else if (len == 3) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else {
    out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// Splits [lo, hi] (same UTF-8 length) into byte-range sequences: the classic
// recursion on the first position whose bytes are not both at their
// extremes. Each sequence is a product of per-position byte ranges.
void split_same_length(uint32_t lo, uint32_t hi, int len, std::vector<ByteSeq>& out) {
  // Find the largest suffix of continuation positions that spans fully.
  for (int i = 1; i < len; ++i) {
    uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        split_same_length(lo, lo | mask, len, out);
        split_same_length((lo | mask) + 1, hi, len, out);
        return;
      }
      if ((hi & mask) != mask) {
        split_same_length(lo, (hi & ~mask) - 1, len, out);
        split_same_length(hi & ~mask, hi, len, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, len, a);
  encode(hi, len, b);
  ByteSeq seq;
  for (int i = 0; i < len; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::pair<uint32_t, uint32_t>> normalize_class(const Expr& e) {
  auto r = e.ranges;
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, hi);
    else
      merged.emplace_back(lo, hi);
  }
  if (!e.negated) return merged;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (auto [lo, hi] : merged) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
  static const uint32_t kLenMax[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  std::vector<ByteSeq> out;
  uint32_t start = lo;
  for (int len = 1; len <= 4 && start <= hi; ++len) {
    if (start > kLenMax[len - 1]) continue;
    uint32_t end = std::min(hi, kLenMax[len - 1]);
    split_same_length(start, end, len, out);
    start = end + 1;
  }
  return out;
}

}  // namespace brioche::grammar
