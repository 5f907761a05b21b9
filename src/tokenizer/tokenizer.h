// Tokenizer: text <-> token ids for BPE vocabularies, byte-level (GPT-2,
// Llama-3, Qwen) and byte-fallback (SentencePiece-style: Llama-2, Gemma).
//
// Pipeline of encode (the order Hugging Face `tokenizers` uses, so ids match):
//   1. added tokens (special and user-defined) are matched in the raw text,
//      longest first, and split out; each becomes its own id,
//   2. every remaining piece is normalized (NFC, Replace, Prepend, ...),
//   3. pre-tokenized into words (Split regex/string, ByteLevel, Metaspace, Digits),
//   4. each word is BPE-merged (merge ranks; byte fallback <0xXX>; ignore_merges).
// decode concatenates token bytes (byte-level mapping undone, "▁" -> " ",
// <0xAB> -> byte) and applies the vocabulary's decoder steps (e.g. strip the
// one leading space SentencePiece prepended).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace brioche::formats {
class GgufFile;
}

namespace brioche::tokenizer {

struct EncodeOptions {
  bool add_special = false;   // prepend bos (when the vocabulary says to add it)
  bool parse_special = true;  // added/special-token strings in the text become their ids
};

struct DecodeOptions {
  bool skip_special = false;  // drop special (control) tokens from the output
};

class TokenizerImpl;

class Tokenizer {
 public:
  // `json_text`: contents of a Hugging Face tokenizer.json.
  // `config_json_text`: optional contents of tokenizer_config.json (bos/eos
  // token names, add_bos_token). Throws brioche::Error naming any
  // unsupported component ("normalizer type 'X' is not supported").
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& json_text,
                                                        const std::string& config_json_text = {});
  // tokenizer.ggml.* keys: model "gpt2" (byte-level BPE with merges) or
  // "llama" (SentencePiece scores, byte fallback).
  static std::unique_ptr<Tokenizer> from_gguf(const formats::GgufFile& gguf);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, EncodeOptions opts = {}) const;
  std::string decode(std::span<const int32_t> ids, DecodeOptions opts = {}) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;                // -1 if none
  int32_t eos_id() const;                // -1 if none
  std::vector<int32_t> eos_ids() const;  // end-of-generation tokens: eos, <|im_end|>, <|eot_id|>, ...
  bool add_bos() const;                  // whether EncodeOptions::add_special prepends bos

  const std::string& token_text(int32_t id) const;  // the vocabulary string, as stored
  // The raw bytes this token decodes to (byte-level mapping undone, "▁" -> " ",
  // "<0xAB>" -> one byte). Special tokens give their text. Used for grammar masks.
  std::string token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;                             // control tokens (bos, eos, <|im_start|>, ...)
  std::optional<int32_t> token_id(std::string_view text) const;  // vocabulary string -> id

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// Turns a stream of ids into text, one push at a time, never emitting half a
// UTF-8 character: bytes of an incomplete sequence (e.g. an emoji split over
// byte-fallback tokens <0xF0><0x9F><0x98><0x80>) are held until complete.
// The concatenation of all push() results plus flush() equals decode(all ids).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions opts = {});
  std::string push(int32_t id);  // returns only complete UTF-8
  std::string flush();           // the rest; invalid leftovers become U+FFFD

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions opts_;
  std::string pending_;   // bytes decoded but not yet returned (incomplete UTF-8 tail)
  bool at_start_ = true;  // the leading-space strip applies only to the first text
};

}  // namespace brioche::tokenizer
