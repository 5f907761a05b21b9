// Unit tests: NFC, UTF-8 helpers, the public API's accessors and options,
// streaming over byte-fallback tokens, and errors for unsupported components.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tokenizer/golden_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

using testing::read_zstd_file;
using testing::source_path;

std::unique_ptr<Tokenizer> load(const std::string& name) {
  const std::string dir = "tests/fixtures/tokenizers/" + name + "/";
  return Tokenizer::from_tokenizer_json(read_zstd_file(source_path(dir + "tokenizer.json.zst")),
                                        read_zstd_file(source_path(dir + "tokenizer_config.json.zst")));
}

const Tokenizer& llama2() {
  static auto tok = load("llama2");
  return *tok;
}
const Tokenizer& qwen3() {
  static auto tok = load("qwen3");
  return *tok;
}

TEST(Unicode, NfcComposesReordersAndKeepsComposedText) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");             // e + acute -> é
  EXPECT_EQ(nfc("a\u0302\u0323"), "\u1ead");       // marks reordered (dot below first), then composed
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("\u212b"), "\u00c5");              // Angstrom sign -> Å (singleton)
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");        // composition exclusion stays decomposed
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("日本語 😀"), "日本語 😀");
}

TEST(Unicode, CompleteUtf8PrefixHoldsBackPartialSequences) {
  const std::string crab = "\xF0\x9F\xA6\x80";
  EXPECT_EQ(complete_utf8_prefix("ab" + crab.substr(0, 1)), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab" + crab.substr(0, 3)), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab" + crab), 6u);
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_TRUE(is_valid_utf8("héllo " + crab));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));
}

TEST(Tokenizer, AccessorsOfLlama2) {
  const Tokenizer& tok = llama2();
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.token_text(1), "<s>");
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(100));
  const auto a = tok.token_id("<0x41>");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(tok.token_bytes(*a), "A");
  EXPECT_EQ(tok.token_bytes(*tok.token_id("\xE2\x96\x81the")), " the");
  EXPECT_FALSE(tok.token_id("definitely-not-a-token").has_value());
  EXPECT_THROW(tok.token_text(32000), Error);
}

TEST(Tokenizer, EncodeOptions) {
  const Tokenizer& tok = llama2();
  const auto plain = tok.encode("Hello world");
  const auto with_bos = tok.encode("Hello world", {.add_special = true});
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  // "</s>" is one id when special strings are parsed, ordinary text otherwise.
  const auto parsed = tok.encode("a</s>b");
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 2), parsed.end());
  const auto literal = tok.encode("a</s>b", {.parse_special = false});
  EXPECT_EQ(std::find(literal.begin(), literal.end(), 2), literal.end());
  EXPECT_EQ(tok.decode(literal), "a</s>b");
  // skip_special drops control tokens.
  EXPECT_EQ(tok.decode(with_bos, {.skip_special = true}), "Hello world");
}

TEST(Tokenizer, Qwen3ByteLevelAndEndOfGeneration) {
  const Tokenizer& tok = qwen3();
  const auto im_end = tok.token_id("<|im_end|>");
  ASSERT_TRUE(im_end.has_value());
  const auto eos = tok.eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), *im_end), eos.end());
  EXPECT_EQ(tok.token_bytes(*tok.token_id("\xC4\xA0hello")), " hello");  // "Ġhello"
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(ids.front(), *tok.token_id("<|im_start|>"));
  EXPECT_EQ(ids.back(), *im_end);
  EXPECT_TRUE(tok.is_special(*im_end));
  // Invalid UTF-8 input is repaired like a Rust String::from_utf8_lossy.
  EXPECT_EQ(tok.decode(tok.encode("a\xFF"
                                  "b")),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(StreamingDetokenizer, EmojiOverByteFallbackTokensIsHeldUntilComplete) {
  const Tokenizer& tok = llama2();
  const std::string text = "I \xF0\x9F\xA6\x80 Rust";  // 🦀 is not in the vocabulary: four <0xXX> tokens
  const auto ids = tok.encode(text);
  StreamingDetokenizer stream(tok);
  std::string out;
  int held = 0;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(piece));
    held += piece.empty();
    out += piece;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_GE(held, 3);  // the first three bytes of the crab gave nothing
}

TEST(StreamingDetokenizer, RandomSplitsOfMultilingualText) {
  const Tokenizer& tok = qwen3();
  const std::string text = "naïve café 👩‍💻 東京タワー 👍🏽 مرحبا नमस्ते 12345";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    // Tokenize in random chunks (split at random byte points inside characters
    // too), then stream all ids: the output must still be exactly the text.
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t len = 1 + rng() % 7;
      while (pos + len < text.size() && (static_cast<uint8_t>(text[pos + len]) & 0xC0) == 0x80) ++len;
      const auto part = tok.encode(text.substr(pos, len));
      ids.insert(ids.end(), part.begin(), part.end());
      pos += len;
    }
    StreamingDetokenizer stream(tok);
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(is_valid_utf8(piece));
      out += piece;
    }
    out += stream.flush();
    EXPECT_EQ(out, text);
  }
}

TEST(Tokenizer, UnsupportedComponentsGiveClearErrors) {
  auto expect_error = [](const std::string& json, const std::string& needle) {
    try {
      Tokenizer::from_tokenizer_json(json);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  expect_error(R"({"normalizer": {"type": "NFKD"}, )" + model + "}", "normalizer type 'NFKD' is not supported");
  expect_error(R"({"pre_tokenizer": {"type": "BertPreTokenizer"}, )" + model + "}",
               "pre_tokenizer type 'BertPreTokenizer'");
  expect_error(R"({"decoder": {"type": "WordPiece"}, )" + model + "}", "decoder type 'WordPiece'");
  expect_error(R"({"model": {"type": "Unigram", "vocab": []}})", "model type 'Unigram' is not supported");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}})",
               "piece 'c' is not in the vocabulary");
  expect_error("{not json", "not valid JSON");
  // A minimal valid one works: merges apply.
  auto tok = Tokenizer::from_tokenizer_json("{" + model + "}");
  EXPECT_EQ(tok->encode("abab"), (std::vector<int32_t>{2, 2}));
}

TEST(Tokenizer, SplitBehaviorsAndMetaspace) {
  // A tiny vocabulary exercising Split behaviors, Digits and Metaspace.
  const std::string vocab =
      R"("vocab": {"▁": 0, "a": 1, "b": 2, "1": 3, "2": 4, "-": 5, "▁a": 6, "12": 7, "a-": 8, "-b": 9})";
  auto make = [&](const std::string& pre) {
    return Tokenizer::from_tokenizer_json(R"({"pre_tokenizer": )" + pre + R"(, "model": {"type": "BPE", )" + vocab +
                                          R"(, "merges": ["▁ a", "1 2", "a -", "- b"]}})");
  };
  // Removed drops the delimiter; Isolated keeps it alone; MergedWithPrevious joins it left.
  EXPECT_EQ(make(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "Removed"})")->encode("a-b"),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(make(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated"})")->encode("a-b"),
            (std::vector<int32_t>{1, 5, 2}));
  EXPECT_EQ(make(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious"})")->encode("a-b"),
            (std::vector<int32_t>{8, 2}));
  EXPECT_EQ(make(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext"})")->encode("a-b"),
            (std::vector<int32_t>{1, 9}));
  // invert: the matches are the words, the rest is the delimiter.
  EXPECT_EQ(
      make(R"({"type": "Split", "pattern": {"Regex": "[ab]"}, "behavior": "Removed", "invert": true})")->encode("a-b"),
      (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(make(R"({"type": "Digits", "individual_digits": true})")->encode("12"), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(make(R"({"type": "Digits", "individual_digits": false})")->encode("12"), (std::vector<int32_t>{7}));
  EXPECT_EQ(
      make(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})")->encode("a a"),
      (std::vector<int32_t>{6, 6}));
  EXPECT_EQ(
      make(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true})")->encode("a a"),
      (std::vector<int32_t>{1, 6}));
}

}  // namespace
}  // namespace brioche::tokenizer
