// The parts of a Tokenizer, filled by the loaders (tokenizer_json.cpp,
// tokenizer_gguf.cpp) and used by tokenizer.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace brioche::tokenizer {

// What decode does to the concatenated token bytes. Token bytes already have
// the byte-level mapping undone, "▁" turned into " " and <0xXX> into bytes.
struct DecoderConfig {
  int strip_leading_spaces = 0;  // SentencePiece: drop the space that encode prepended
};

class TokenizerImpl {
 public:
  // Loaders fill these, then call finish().
  std::vector<std::string> token_texts;  // [vocab_size] vocabulary strings ("" for holes)
  std::vector<std::string> token_bytes;  // [vocab_size] decoded bytes of each token
  std::vector<uint8_t> special;          // [vocab_size] 1 for control tokens
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<BpeModel> model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  DecoderConfig decoder;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::vector<int32_t> eos_ids;
  bool add_bos = false;

  // Builds the lookup tables once the fields above are set.
  void finish();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts) const;
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& opts) const;
  std::optional<int32_t> find_token(std::string_view text) const;
  void check_id(int32_t id) const;

 private:
  void encode_piece(std::string_view piece, bool starts_input, std::vector<int32_t>& out) const;

  AddedTokenMatcher matcher_;
  StringToId text_to_id_;
};

// The end-of-generation tokens that chat models use, found by name.
std::vector<int32_t> find_end_of_generation_tokens(const TokenizerImpl& impl);

}  // namespace brioche::tokenizer
