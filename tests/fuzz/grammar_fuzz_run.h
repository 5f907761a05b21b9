// Shared body of the grammar libFuzzer targets (json_schema_fuzz,
// regex_fuzz, ebnf_fuzz): a grammar built from the fuzzed text is compiled
// over a small vocabulary and a matcher takes a few steps. Any input must
// either work or throw brioche::Error; any other exception, a crash, a hang
// or a mask that allows a token the matcher then refuses is a finding.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/compiler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace brioche::grammar::fuzz {

// Every single byte, some multi-byte tokens (JSON punctuation, words, a
// split UTF-8 character) and an EOS: small, so one input compiles in
// milliseconds, yet tokens cross rule ends and characters.
inline std::shared_ptr<const Vocabulary> small_vocabulary() {
  static const auto vocabulary = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"\"",    "true",  "false", "null", "{\"", "\":", "\",",      "\"}",  "ab",       "abc",
                          " \"",   "\n\n",  "  ",    "12",   "-0",  ".5e", "\xC3\xA9", "\xC3", "\xE2\x82", "\xAC",
                          "hello", "2024-", "-01",   "T12:", "[{",  "}]",  "\\u00",    "\\\""})
      tokens.push_back(t);
    tokens.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(tokens.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(tokens), VocabularyOptions{.eos_ids = {eos}});
  }();
  return vocabulary;
}

// Budgets that keep one input fast under the sanitizers; the bounds under
// test (nesting, work counting) are the production ones.
inline CompileLimits fuzz_limits() {
  CompileLimits limits;
  limits.max_work = 3'000'000;
  limits.max_mask_bytes = 16u << 20;
  limits.automaton.max_states = 50'000;
  return limits;
}

// Compiles `grammar` and walks up to 16 steps, choosing among the allowed
// tokens by `seed`; checks that every chosen token is accepted.
inline void compile_and_walk(const Grammar& grammar, uint64_t seed) {
  auto compiled = CompiledGrammar::compile(grammar, small_vocabulary(), fuzz_limits());
  GrammarMatcher matcher(compiled);
  std::vector<uint32_t> mask(matcher.mask_words());
  std::vector<int32_t> allowed;
  for (int step = 0; step < 16 && !matcher.is_terminated(); ++step) {
    matcher.fill_next_token_bitmask(mask.data());
    allowed.clear();
    for (int32_t id = 0; id < small_vocabulary()->size(); ++id)
      if (mask[id >> 5] >> (id & 31) & 1) allowed.push_back(id);
    if (allowed.empty()) break;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const int32_t token = allowed[(seed >> 33) % allowed.size()];
    if (!matcher.accept_token(token)) std::abort();  // the mask allowed it
    if (step == 3) {
      matcher.rollback(1);  // undo and redo: the same token stays allowed
      if (!matcher.accept_token(token)) std::abort();
    }
  }
  volatile bool sink = matcher.can_terminate();
  (void)sink;
  (void)matcher.find_jump_forward_string();
}

inline uint64_t seed_of(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace brioche::grammar::fuzz
