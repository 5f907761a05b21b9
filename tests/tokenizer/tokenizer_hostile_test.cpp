// Hostile input to the tokenizer: multi-megabyte words (the BPE merge loop
// must stay O(n log n)), invalid UTF-8, ids outside the vocabulary, and
// malformed or hostile tokenizer.json / tokenizer_config.json / GGUF
// metadata. Each gives a result or a brioche::Error that says what was
// wrong; none crashes. Sizes are asserted, times are not.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/golden_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

using testing::read_zstd_file;
using testing::source_path;
using json = nlohmann::json;

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    const std::string dir = "tests/fixtures/tokenizers/" + name + "/";
    slot = Tokenizer::from_tokenizer_json(read_zstd_file(source_path(dir + "tokenizer.json.zst")),
                                          read_zstd_file(source_path(dir + "tokenizer_config.json.zst")));
  }
  return *slot;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a brioche::Error> ") + e.what();
  }
  return "<no error>";
}

// ---- huge words --------------------------------------------------------------------

// 5 MiB of one letter is one pre-token for Llama-3 (and the whole input is
// one word for Llama-2's SentencePiece vocabulary). Hugging Face tokenizers
// 0.23.3 gives 655,360 ids ("aaaaaaaa" x 655,360) for Llama-3 and 655,363
// for Llama-2 (tools: encode("a" * 5 << 20, add_special_tokens=False)).
TEST(TokenizerHostile, FiveMebibyteWordEncodesLikeHuggingFace) {
  const std::string word(size_t{5} << 20, 'a');
  const Tokenizer& llama3 = fixture("llama3");
  const std::vector<int32_t> ids = llama3.encode(word);
  EXPECT_EQ(ids.size(), 655360u);
  EXPECT_EQ(llama3.decode(ids), word);
  const Tokenizer& llama2 = fixture("llama2");
  const std::vector<int32_t> sp_ids = llama2.encode(word);
  EXPECT_EQ(sp_ids.size(), 655363u);
  EXPECT_EQ(llama2.decode(sp_ids), word);
}

TEST(TokenizerHostile, HugeRunsOfSpacesAndNewlinesRoundTrip) {
  for (const char* family : {"llama3", "qwen3", "llama2"}) {
    for (char c : {' ', '\n'}) {
      const std::string run(size_t{1} << 20, c);
      const Tokenizer& tok = fixture(family);
      const std::vector<int32_t> ids = tok.encode(run);
      EXPECT_GT(ids.size(), 0u) << family;
      EXPECT_LE(ids.size(), run.size() + 1) << family;  // byte fallback: one <0x0A> per newline, plus the prepended ▁
      EXPECT_EQ(tok.decode(ids), run) << family;
    }
  }
}

// ---- invalid UTF-8 -------------------------------------------------------------------

// Hugging Face takes Rust strings: bytes that are not UTF-8 become U+FFFD
// first (from_utf8_lossy: one per maximal invalid subsequence). Qwen3's ids
// for the lossy text come from tokenizers 0.23.3.
TEST(TokenizerHostile, InvalidUtf8EncodesAsItsLossyText) {
  const std::string bad = "ok \xFF\xFE \xC0\x80 \xED\xA0\x80 \xF4\x90\x80\x80 end \xE2\x82";
  for (const char* family : {"qwen3", "llama3", "llama2", "gemma3"}) {
    const Tokenizer& tok = fixture(family);
    const std::vector<int32_t> ids = tok.encode(bad);
    EXPECT_EQ(ids, tok.encode(utf8_lossy(bad))) << family;
    EXPECT_EQ(tok.decode(ids), utf8_lossy(bad)) << family;
  }
  const std::vector<int32_t> expected = {562, 220, 9973, 220, 9973, 220, 57332, 59630, 835, 29333};
  EXPECT_EQ(fixture("qwen3").encode(bad), expected);
  // Megabytes of stray continuation bytes: each is one U+FFFD.
  std::string noise;
  for (int i = 0; i < (1 << 20); ++i) noise += char(0x80 + i % 64);
  const std::vector<int32_t> ids = fixture("llama3").encode(noise);
  std::string replacement;
  for (int i = 0; i < (1 << 20); ++i) replacement += "\xEF\xBF\xBD";
  EXPECT_EQ(fixture("llama3").decode(ids), replacement);
}

// ---- ids outside the vocabulary --------------------------------------------------------

TEST(TokenizerHostile, OutOfRangeIdsThrowOnDecode) {
  const Tokenizer& tok = fixture("qwen3");
  const int32_t n = tok.vocab_size();
  for (int32_t id : {-1, n, n + 1000, INT32_MAX, INT32_MIN}) {
    const std::vector<int32_t> ids = {100, id, 200};
    std::string e = error_of([&] { tok.decode(ids); });
    EXPECT_NE(e.find("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(n) + ")"),
              std::string::npos)
        << e;
    EXPECT_NE(error_of([&] { tok.token_text(id); }).find("out of range"), std::string::npos);
    EXPECT_NE(error_of([&] { tok.token_bytes(id); }).find("out of range"), std::string::npos);
    EXPECT_NE(error_of([&] { tok.is_special(id); }).find("out of range"), std::string::npos);
    StreamingDetokenizer stream(tok);
    EXPECT_NE(error_of([&] { stream.push(id); }).find("out of range"), std::string::npos);
  }
}

// ---- hostile tokenizer.json ----------------------------------------------------------

// A small valid byte-level tokenizer.json; the cases below break one part.
json tiny_tokenizer() {
  json vocab = json::object();
  const char* letters = "abcdefghijklmnopqrstuvwxyz";
  for (int i = 0; i < 26; ++i) vocab[std::string(1, letters[i])] = i;
  vocab["\xC4\xA0"] = 26;  // 'Ġ', the byte-level space
  vocab["ab"] = 27;
  return json{{"version", "1.0"},
              {"added_tokens", json::array({json{{"id", 28}, {"content", "<|end|>"}, {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}}};
}

TEST(TokenizerHostile, TinyTokenizerLoads) {
  auto tok = Tokenizer::from_tokenizer_json(tiny_tokenizer().dump());
  EXPECT_EQ(tok->encode("ab c<|end|>"), (std::vector<int32_t>{27, 26, 2, 28}));
}

TEST(TokenizerHostile, MalformedTokenizerJsonThrowsWhatWasWrong) {
  struct Case {
    const char* what;
    std::function<void(json&)> spoil;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"vocab id negative", [](json& t) { t["model"]["vocab"]["a"] = -5; }, "token id -5 is out of range"},
      {"vocab id huge", [](json& t) { t["model"]["vocab"]["a"] = int64_t{1} << 40; }, "is out of range"},
      {"vocab id beyond the table", [](json& t) { t["model"]["vocab"]["a"] = 100000; },
       "token id 100000 is out of range [0, 1082)"},
      {"vocab id a float", [](json& t) { t["model"]["vocab"]["a"] = 1.5; }, "expected an integer id, found 1.5"},
      {"vocab id a string", [](json& t) { t["model"]["vocab"]["a"] = "1"; }, "expected an integer id"},
      {"vocab an array",
       [](json& t) {
         t["model"]["vocab"] = json::array({1, 2});
       },
       "model.vocab: expected an object"},
      {"added token id", [](json& t) { t["added_tokens"][0]["id"] = 1u << 31; },
       "added_tokens: token id 2147483648 is out of range"},
      {"added token content", [](json& t) { t["added_tokens"][0]["content"] = 7; },
       "added_tokens content: expected a string"},
      {"added tokens an object", [](json& t) { t["added_tokens"] = json::object(); },
       "added_tokens: expected an array"},
      {"merges an object", [](json& t) { t["model"]["merges"] = json::object(); }, "model.merges: expected an array"},
      {"merge pair of numbers",
       [](json& t) {
         t["model"]["merges"] = json::array({json::array({1, 2})});
       },
       "model.merges: expected a string"},
      {"merge without a space", [](json& t) { t["model"]["merges"] = json::array({"ab"}); }, "expected \"left right\""},
      {"merge of unknown pieces", [](json& t) { t["model"]["merges"] = json::array({"x yz"}); },
       "piece 'yz' is not in the vocabulary"},
      {"model missing", [](json& t) { t.erase("model"); }, "tokenizer.json: unexpected structure"},
      {"model type", [](json& t) { t["model"]["type"] = "WordPiece"; }, "model type 'WordPiece' is not supported"},
      {"flag not a bool", [](json& t) { t["pre_tokenizer"]["add_prefix_space"] = "yes"; },
       "\"add_prefix_space\" must be true or false"},
      {"normalizer content huge",
       [](json& t) {
         t["normalizer"] =
             json{{"type", "Replace"}, {"pattern", json{{"String", " "}}}, {"content", std::string(1 << 20, 'x')}};
       },
       "normalizer Replace: content of 1048576 bytes; the limit is 32"},
      {"prepend huge",
       [](json& t) {
         t["normalizer"] = json{{"type", "Prepend"}, {"prepend", std::string(100, 'x')}};
       },
       "the limit is 32"},
      {"pattern not an object",
       [](json& t) {
         t["normalizer"] = json{{"type", "Replace"}, {"pattern", "x"}, {"content", "y"}};
       },
       "expected pattern"},
      {"bad regex",
       [](json& t) {
         t["pre_tokenizer"] =
             json{{"type", "Split"}, {"pattern", json{{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
       },
       "PCRE2 error"},
      {"unknown pre-tokenizer",
       [](json& t) {
         t["pre_tokenizer"] = json{{"type", "Whitespace"}};
       },
       "pre_tokenizer type 'Whitespace' is not supported"},
      {"type missing", [](json& t) { t["decoder"] = json::array(); },
       "decoder: expected an object with a string \"type\""},
      {"strip start huge",
       [](json& t) {
         t["decoder"] = json{{"type", "Strip"}, {"content", " "}, {"start", 1e30}, {"stop", 0}};
       },
       "decoder Strip start 1e+30 is not an integer in [0, 64]"},
      {"post processor odd",
       [](json& t) {
         t["post_processor"] =
             json{{"type", "TemplateProcessing"}, {"single", json::array({json{{"SpecialToken", json{{"id", 5}}}}})}};
       },
       "post_processor SpecialToken id: expected a string"},
  };
  for (const Case& c : cases) {
    json t = tiny_tokenizer();
    c.spoil(t);
    const std::string text = t.dump();
    std::string e = error_of([&] { Tokenizer::from_tokenizer_json(text); });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.what << ": " << e;
    EXPECT_EQ(e.find("<not a brioche::Error>"), std::string::npos) << c.what << ": " << e;
  }
}

TEST(TokenizerHostile, DeepOrInvalidJsonIsRefusedBeforeParsing) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  std::string e = error_of([&] { Tokenizer::from_tokenizer_json(deep); });
  EXPECT_EQ(e.rfind("tokenizer.json", 0), 0u) << e;
  EXPECT_NE(e.find("1048576 levels deep; the limit is 128"), std::string::npos) << e;
  e = error_of([&] { Tokenizer::from_tokenizer_json("{\"model\": "); });
  EXPECT_NE(e.find("tokenizer.json is not valid JSON"), std::string::npos) << e;
  e = error_of([&] { Tokenizer::from_tokenizer_json("{\"model\": 1e999}"); });  // too large for a double
  EXPECT_NE(e.find("tokenizer.json is not valid JSON"), std::string::npos) << e;
  e = error_of([&] { Tokenizer::from_tokenizer_json("[1, 2]"); });
  EXPECT_NE(e.find("expected a JSON object at the top, found array"), std::string::npos) << e;
  const std::string valid = tiny_tokenizer().dump();
  e = error_of([&] { Tokenizer::from_tokenizer_json(valid, deep); });
  EXPECT_EQ(e.rfind("tokenizer_config.json", 0), 0u) << e;
  EXPECT_NE(e.find("1048576 levels deep; the limit is 128"), std::string::npos) << e;
  e = error_of([&] { Tokenizer::from_tokenizer_json(valid, "\"text\""); });
  EXPECT_NE(e.find("tokenizer_config.json: expected a JSON object"), std::string::npos) << e;
  // Oddly typed config fields are ignored, as transformers would fail later
  // for them; they never crash.
  EXPECT_EQ(error_of([&] {
              Tokenizer::from_tokenizer_json(valid,
                                             R"({"bos_token": 5, "eos_token": {"content": []}, "add_bos_token": "x"})");
            }),
            "<no error>");
}

// ---- hostile GGUF metadata -------------------------------------------------------------

std::vector<uint8_t> llama_gguf(int64_t bos_id, float first_score) {
  formats::GgufWriter writer;
  std::vector<std::string> texts = {"<unk>",
                                    "<s>",
                                    "</s>",
                                    "\xE2\x96\x81",
                                    "a",
                                    "\xE2\x96\x81"
                                    "a",
                                    std::string(5000, 'b')};
  std::vector<double> scores = {0, 0, 0, first_score, -1, -2, -3};
  std::vector<int64_t> types = {2, 3, 3, 1, 1, 1, 1};
  writer.add("tokenizer.ggml.model", formats::GgufValue::string("llama"));
  writer.add("tokenizer.ggml.tokens", formats::GgufValue::strings(texts));
  writer.add("tokenizer.ggml.scores", formats::GgufValue::floats(formats::GgufType::F32, scores));
  writer.add("tokenizer.ggml.token_type", formats::GgufValue::ints(formats::GgufType::I32, types));
  writer.add("tokenizer.ggml.bos_token_id", formats::GgufValue::integer(formats::GgufType::I64, bos_id));
  writer.add("tokenizer.ggml.unknown_token_id", formats::GgufValue::integer(formats::GgufType::U32, 0));
  return writer.serialize();
}

TEST(TokenizerHostile, GgufSpecialIdsOutsideTheVocabularyAreRefused) {
  const auto good = llama_gguf(1, -0.5f);
  auto tok = Tokenizer::from_gguf(*formats::GgufFile::parse(good.data(), good.size(), "ok.gguf"));
  EXPECT_EQ(tok->encode("a a"), (std::vector<int32_t>{5, 5}));
  for (int64_t bad : {int64_t{7}, int64_t{1} << 40, int64_t{-2}}) {
    const auto bytes = llama_gguf(bad, -0.5f);
    std::string e =
        error_of([&] { Tokenizer::from_gguf(*formats::GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf")); });
    EXPECT_NE(e.find("bad.gguf: tokenizer.ggml.bos_token_id = " + std::to_string(bad) +
                     " is not a token id (the vocabulary has 7 tokens)"),
              std::string::npos)
        << e;
  }
  // NaN scores load (ordered last) instead of breaking the sort.
  const auto nan = llama_gguf(1, std::nanf(""));
  EXPECT_EQ(error_of([&] { Tokenizer::from_gguf(*formats::GgufFile::parse(nan.data(), nan.size(), "nan.gguf")); }),
            "<no error>");
}

}  // namespace
}  // namespace brioche::tokenizer
