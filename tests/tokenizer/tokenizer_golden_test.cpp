// Token ids identical to Hugging Face `tokenizers` on a 1.1 MB corpus
// (goldens from tools/oracle/tokenizer_goldens.py), decode agreement, and the
// streaming detokenizer on every document.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "formats/gguf.h"
#include "tokenizer/golden_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace brioche::tokenizer {
namespace {

using testing::load_corpus;
using testing::load_golden;
using testing::read_zstd_file;
using testing::source_path;

const testing::Corpus& corpus() {
  static const testing::Corpus c = load_corpus();
  return c;
}

std::string default_model_path() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    if (name == "smollm2") {
      slot = Tokenizer::from_gguf(*formats::GgufFile::open(default_model_path()));
    } else {
      const std::string dir = "tests/fixtures/tokenizers/" + name + "/";
      slot = Tokenizer::from_tokenizer_json(read_zstd_file(source_path(dir + "tokenizer.json.zst")),
                                            read_zstd_file(source_path(dir + "tokenizer_config.json.zst")));
    }
  }
  return *slot;
}

std::string show_ids(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::ostringstream s;
  for (size_t i = from; i < std::min(to, ids.size()); ++i) {
    s << ids[i] << "'";
    for (char c : tok.token_text(ids[i])) {
      if (c == '\n')
        s << "\\n";
      else
        s << c;
    }
    s << "' ";
  }
  return s.str();
}

// Compares token for token; on the first mismatch shows ids and text around it.
void expect_same_ids(const Tokenizer& tok, const std::string& name, size_t doc_index, const std::string& doc,
                     const std::vector<int32_t>& ours, const std::vector<int32_t>& expected) {
  if (ours == expected) return;
  size_t at = 0;
  while (at < ours.size() && at < expected.size() && ours[at] == expected[at]) ++at;
  const size_t from = at > 4 ? at - 4 : 0;
  std::string prefix;
  for (size_t i = 0; i < at; ++i) prefix += tok.token_bytes(expected[i]);
  const size_t text_at = prefix.size();
  ADD_FAILURE() << name << ": doc " << doc_index << ": first mismatch at token " << at << " (ours " << ours.size()
                << " tokens, HF " << expected.size()
                << ")\n  text near: " << ::testing::PrintToString(doc.substr(text_at > 20 ? text_at - 20 : 0, 60))
                << "\n  ours: " << show_ids(tok, ours, from, at + 6)
                << "\n  HF:   " << show_ids(tok, expected, from, at + 6);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, IdsMatchHuggingFaceOnCorpus) {
  const std::string name = GetParam();
  if (name == "smollm2" && !std::filesystem::exists(default_model_path()))
    GTEST_SKIP() << "skipped: default model not found at " << default_model_path();
  const Tokenizer& tok = fixture(name);
  const testing::Golden golden = load_golden(name);
  const auto& docs = corpus().docs;
  ASSERT_EQ(golden.docs.size(), docs.size()) << golden.metadata;
  size_t bytes = 0, mismatches = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    bytes += docs[i].size();
    const std::vector<int32_t> ids = tok.encode(docs[i]);
    if (ids != golden.docs[i].ids && ++mismatches <= 3) expect_same_ids(tok, name, i, docs[i], ids, golden.docs[i].ids);
  }
  EXPECT_EQ(mismatches, 0u) << name << ": documents whose ids differ from " << golden.metadata;
  EXPECT_GE(bytes, 1000000u) << "corpus must be at least 1 MB";
}

TEST_P(GoldenTest, DecodeMatchesHuggingFace) {
  const std::string name = GetParam();
  if (name == "smollm2" && !std::filesystem::exists(default_model_path()))
    GTEST_SKIP() << "skipped: default model not found at " << default_model_path();
  const Tokenizer& tok = fixture(name);
  const testing::Golden golden = load_golden(name);
  const auto& docs = corpus().docs;
  size_t mismatches = 0, roundtrips = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto& g = golden.docs[i];
    const std::string& expected = g.decode_is_input ? docs[i] : g.decoded;
    const std::string ours = tok.decode(g.ids);
    roundtrips += g.decode_is_input;
    if (ours != expected && ++mismatches <= 3)
      ADD_FAILURE() << name << ": doc " << i
                    << ": decode differs from HF\n  ours: " << ::testing::PrintToString(ours.substr(0, 200))
                    << "\n  HF:   " << ::testing::PrintToString(expected.substr(0, 200));
  }
  EXPECT_EQ(mismatches, 0u);
  // decode(encode(x)) == x wherever HF round-trips (all documents for the
  // byte-level vocabularies; SentencePiece/NFC ones change some inputs).
  RecordProperty("roundtrip_docs", static_cast<int>(roundtrips));
}

TEST_P(GoldenTest, StreamingDetokenizerEqualsDecode) {
  const std::string name = GetParam();
  if (name == "smollm2" && !std::filesystem::exists(default_model_path()))
    GTEST_SKIP() << "skipped: default model not found at " << default_model_path();
  const Tokenizer& tok = fixture(name);
  const testing::Golden golden = load_golden(name);
  for (size_t i = 0; i < golden.docs.size(); ++i) {
    const auto& ids = golden.docs[i].ids;
    StreamingDetokenizer stream(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      // Never half a character: every piece is complete, valid UTF-8.
      ASSERT_TRUE(is_valid_utf8(piece)) << name << ": doc " << i;
      streamed += piece;
    }
    streamed += stream.flush();
    ASSERT_EQ(streamed, tok.decode(ids)) << name << ": doc " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::Values("llama2", "llama3", "qwen3", "gemma3", "smollm2"),
                         [](const auto& info) { return info.param; });

// decode(encode(x)) == x for the byte-level vocabularies on every document,
// also with special-token parsing off.
TEST(Tokenizer, ByteLevelRoundTripsEveryDocument) {
  for (const char* name : {"llama3", "smollm2"}) {
    if (std::string(name) == "smollm2" && !std::filesystem::exists(default_model_path())) continue;
    const Tokenizer& tok = fixture(name);
    for (const std::string& doc : corpus().docs) {
      ASSERT_EQ(tok.decode(tok.encode(doc)), doc) << name;
      ASSERT_EQ(tok.decode(tok.encode(doc, {.parse_special = false})), doc) << name;
    }
  }
}

// A SentencePiece-style vocabulary given as a llama-type GGUF (scores + byte
// tokens, no merges) must tokenize like the equivalent tokenizer.json.
TEST(Tokenizer, LlamaGgufFromScoresMatchesLlama2Golden) {
  const std::string json_text = read_zstd_file(source_path("tests/fixtures/tokenizers/llama2/tokenizer.json.zst"));
  const Tokenizer& reference = fixture("llama2");
  // Build the GGUF vocabulary: token texts by id, scores that order the
  // merged pieces like the merge list (score = -rank of the first merge
  // producing the piece), token types.
  const int32_t n = reference.vocab_size();
  std::vector<std::string> texts(n);
  for (int32_t id = 0; id < n; ++id) texts[id] = reference.token_text(id);
  std::vector<double> scores(n, 0.0);
  std::vector<int64_t> types(n, 1);
  {
    const auto merges = nlohmann::json::parse(json_text).at("model").at("merges");
    std::map<std::string, int32_t> id_of;
    for (int32_t id = 0; id < n; ++id) id_of.emplace(texts[id], id);
    std::vector<bool> seen(n, false);
    int rank = 0;
    for (const auto& m : merges) {
      const std::string merge = m.get<std::string>();
      const size_t space = merge.find(' ');
      auto it = id_of.find(merge.substr(0, space) + merge.substr(space + 1));
      if (it != id_of.end() && !seen[it->second]) {
        seen[it->second] = true;
        scores[it->second] = -rank;
      }
      ++rank;
    }
    ASSERT_GT(rank, 50000);
  }
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = texts[id];
    if (t.size() == 6 && t.rfind("<0x", 0) == 0) types[id] = 6;
  }
  types[0] = 2;             // <unk>
  types[1] = types[2] = 3;  // <s>, </s>
  formats::GgufWriter writer;
  writer.add("tokenizer.ggml.model", formats::GgufValue::string("llama"));
  writer.add("tokenizer.ggml.tokens", formats::GgufValue::strings(texts));
  writer.add("tokenizer.ggml.scores", formats::GgufValue::floats(formats::GgufType::F32, scores));
  writer.add("tokenizer.ggml.token_type", formats::GgufValue::ints(formats::GgufType::I32, types));
  writer.add("tokenizer.ggml.bos_token_id", formats::GgufValue::integer(formats::GgufType::U32, 1));
  writer.add("tokenizer.ggml.eos_token_id", formats::GgufValue::integer(formats::GgufType::U32, 2));
  writer.add("tokenizer.ggml.unknown_token_id", formats::GgufValue::integer(formats::GgufType::U32, 0));
  const std::vector<uint8_t> bytes = writer.serialize();
  auto gguf = formats::GgufFile::parse(bytes.data(), bytes.size(), "llama2-synthetic.gguf");
  auto tok = Tokenizer::from_gguf(*gguf);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  const testing::Golden golden = load_golden("llama2");
  const auto& docs = corpus().docs;
  size_t mismatches = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(docs[i]);
    if (ids != golden.docs[i].ids && ++mismatches <= 3)
      expect_same_ids(*tok, "llama2-gguf", i, docs[i], ids, golden.docs[i].ids);
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace brioche::tokenizer
