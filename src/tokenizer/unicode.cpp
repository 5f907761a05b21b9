#include "tokenizer/unicode.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace brioche::tokenizer {
namespace {
#include "tokenizer/unicode_nfc_tables.inc"

// Hangul syllables compose and decompose by arithmetic (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct NfcData {
  std::unordered_map<uint32_t, uint8_t> combining_class;
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomposition;  // cp -> {offset, len}
  std::unordered_map<uint64_t, uint32_t> composition;                         // (first << 32 | second) -> composed
  // One bit per code point: set when the character may change under NFC
  // (decomposes, has a non-zero combining class, composes with a previous
  // character, or is a Hangul jamo/syllable).
  std::vector<uint64_t> maybe_changes;

  NfcData() : maybe_changes(0x110000 / 64, 0) {
    auto mark = [&](uint32_t cp) { maybe_changes[cp >> 6] |= uint64_t{1} << (cp & 63); };
    for (const auto& [cp, ccc] : kCombiningClass) {
      combining_class.emplace(cp, static_cast<uint8_t>(ccc));
      mark(cp);
    }
    for (const auto& [cp, offset, length] : kDecomposition) {
      decomposition.emplace(cp, std::make_pair(offset, length));
      mark(cp);
    }
    for (const auto& [first, second, composed] : kComposition) {
      composition.emplace(uint64_t{first} << 32 | second, composed);
      mark(second);
    }
    for (uint32_t cp = kLBase; cp < kLBase + kLCount; ++cp) mark(cp);
    for (uint32_t cp = kVBase; cp < kVBase + kVCount; ++cp) mark(cp);
    for (uint32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) mark(cp);
    for (uint32_t cp = kSBase; cp < kSBase + kSCount; ++cp) mark(cp);
  }

  bool may_change(uint32_t cp) const { return cp < 0x110000 && ((maybe_changes[cp >> 6] >> (cp & 63)) & 1); }
  uint8_t ccc(uint32_t cp) const {
    auto it = combining_class.find(cp);
    return it == combining_class.end() ? 0 : it->second;
  }
};

const NfcData& nfc_data() {
  static const NfcData data;
  return data;
}

void decompose(const NfcData& data, uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it = data.decomposition.find(cp);
  if (it == data.decomposition.end()) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionData + it->second.first,
             kDecompositionData + it->second.first + it->second.second);
}

// Returns the primary composite of (first, second), or 0 if none.
uint32_t compose_pair(const NfcData& data, uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  auto it = data.composition.find(uint64_t{first} << 32 | second);
  return it == data.composition.end() ? 0 : it->second;
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of a valid UTF-8 sequence at bytes[pos] (1..4), 0 if invalid, or
// -1 if valid so far but cut off by the end of `bytes`.
static int valid_sequence_at(std::string_view bytes, size_t pos) {
  const auto b0 = static_cast<uint8_t>(bytes[pos]);
  if (b0 < 0x80) return 1;
  int length;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < length; ++i) {
    if (pos + i >= bytes.size()) return -1;
    const auto b = static_cast<uint8_t>(bytes[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return length;
}

uint32_t next_codepoint(std::string_view text, size_t& pos) {
  const int length = valid_sequence_at(text, pos);
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (length <= 0) {
    ++pos;
    return 0xFFFD;
  }
  uint32_t cp;
  switch (length) {
    case 1: cp = b0; break;
    case 2: cp = (b0 & 0x1F) << 6 | (text[pos + 1] & 0x3F); break;
    case 3: cp = (b0 & 0x0F) << 12 | (text[pos + 1] & 0x3F) << 6 | (text[pos + 2] & 0x3F); break;
    default:
      cp = (b0 & 0x07) << 18 | (text[pos + 1] & 0x3F) << 12 | (text[pos + 2] & 0x3F) << 6 | (text[pos + 3] & 0x3F);
  }
  pos += length;
  return cp;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  // Only the last (up to 3) bytes can be an incomplete sequence.
  const size_t start = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t pos = start; pos < bytes.size(); ++pos) {
    const auto b = static_cast<uint8_t>(bytes[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte
    if (valid_sequence_at(bytes, pos) == -1) return pos;
  }
  return bytes.size();
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int length = valid_sequence_at(bytes, pos);
    if (length <= 0) return false;
    pos += length;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int length = valid_sequence_at(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
      continue;
    }
    // A maximal prefix of a valid sequence counts as one error (Unicode's
    // "substitution of maximal subparts").
    size_t skip = 1;
    const size_t want = utf8_sequence_length(static_cast<uint8_t>(bytes[pos]));
    while (skip < want && pos + skip < bytes.size() && valid_sequence_at(bytes.substr(0, pos + skip + 1), pos) == -1)
      ++skip;
    if (length == -1) skip = bytes.size() - pos;
    out.append("\xEF\xBF\xBD");
    pos += skip;
  }
  return out;
}

std::string nfc(std::string_view text) {
  const NfcData& data = nfc_data();
  // Fast path: text with no character that NFC could touch is already NFC.
  size_t pos = 0;
  bool needs_work = false;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (data.may_change(next_codepoint(text, pos))) {
      needs_work = true;
      break;
    }
  }
  if (!needs_work) return std::string(text);

  std::vector<uint32_t> cps;  // [n_codepoints] fully decomposed
  cps.reserve(text.size());
  pos = 0;
  while (pos < text.size()) decompose(data, next_codepoint(text, pos), cps);

  // Canonical ordering: stable-sort each run of non-starters by class.
  std::vector<uint8_t> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = data.ccc(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && classes[end] != 0) ++end;
    if (end - i > 1) {
      std::vector<std::pair<uint8_t, uint32_t>> run;
      for (size_t k = i; k < end; ++k) run.emplace_back(classes[k], cps[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < end; ++k) std::tie(classes[k], cps[k]) = run[k - i];
    }
    i = end;
  }

  // Canonical composition: a character combines with the last starter unless
  // blocked by an intervening character of equal or higher class (or a starter).
  size_t out_len = 0;
  long starter = -1;  // index in the output of the last starter
  int last_class = -1;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const uint8_t cls = classes[i];
    if (starter >= 0) {
      const bool blocked = last_class != -1 && (last_class >= cls || last_class == 0);
      if (!blocked || (last_class == -1)) {
        if (uint32_t composed = compose_pair(data, cps[starter], cp)) {
          cps[starter] = composed;
          continue;
        }
      }
    }
    if (cls == 0) {
      starter = static_cast<long>(out_len);
      last_class = -1;
    } else {
      last_class = cls;
    }
    cps[out_len] = cp;
    classes[out_len] = cls;
    ++out_len;
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < out_len; ++i) append_utf8(out, cps[i]);
  return out;
}

const char* nfc_unicode_version() { return kUnicodeVersion; }

}  // namespace brioche::tokenizer
