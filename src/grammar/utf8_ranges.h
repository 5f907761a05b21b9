// Character classes as UTF-8 byte-range sequences: what the automaton's
// byte edges read for a class over codepoints 0..0x10FFFF (surrogates
// included, overlong forms excluded).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace brioche::grammar {

// Sorted, merged codepoint ranges of a class (complemented when negated).
std::vector<std::pair<uint32_t, uint32_t>> normalize_class(const Expr& e);

// One UTF-8 byte sequence per element: an inclusive byte range per position.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// The codepoints lo..hi as a union of byte-range sequences (each a product of
// per-position ranges), shortest encodings first.
std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace brioche::grammar
