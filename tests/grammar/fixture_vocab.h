// Test helpers: zstd files, fixture vocabularies decoded to token bytes.
#pragma once

#include <zstd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/vocabulary.h"

namespace brioche::grammar::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRIOCHE_CHECK(in.good(), "cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string read_zstd(const std::string& path) {
  std::string src = read_file(path), out;
  ZSTD_DStream* ds = ZSTD_createDStream();
  ZSTD_initDStream(ds);
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  std::vector<char> buf(1 << 20);
  while (in.pos < in.size) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    size_t r = ZSTD_decompressStream(ds, &ob, &in);
    BRIOCHE_CHECK(!ZSTD_isError(r), "zstd: ", ZSTD_getErrorName(r), " in ", path);
    out.append(buf.data(), ob.pos);
    if (r == 0 && in.pos == in.size) break;
  }
  ZSTD_freeDStream(ds);
  return out;
}

inline std::string source_path(const std::string& rel) { return std::string(BRIOCHE_SOURCE_DIR) + "/" + rel; }

struct FixtureVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> special;
};

// GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to
// U+0100 upward in byte order.
inline std::vector<int> unicode_to_byte_table() {
  std::vector<int> table(512, -1);
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<bool> kept(256, false);
  for (int b : bs) {
    kept[b] = true;
    table[b] = b;
  }
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (!kept[b]) table[256 + n++] = b;
  return table;
}

// Token bytes of a fixture tokenizer.json (byte-level BPE or SentencePiece
// style). Special added tokens decode to "" and are listed in `special`.
inline FixtureVocab load_fixture_vocab(const std::string& family) {
  auto j = nlohmann::json::parse(read_zstd(source_path("tests/fixtures/tokenizers/" + family + "/tokenizer.json.zst")));
  const auto& vocab = j["model"]["vocab"];
  bool byte_level = j.contains("decoder") && j["decoder"].is_object() && j["decoder"].value("type", "") == "ByteLevel";
  int32_t n = 0;
  std::vector<std::pair<std::string, int32_t>> entries;
  if (vocab.is_array()) {
    for (size_t i = 0; i < vocab.size(); ++i)
      entries.emplace_back(vocab[i][0].get<std::string>(), static_cast<int32_t>(i));
  } else {
    for (auto& [k, v] : vocab.items()) entries.emplace_back(k, v.get<int32_t>());
  }
  for (auto& e : entries) n = std::max(n, e.second + 1);
  for (auto& t : j["added_tokens"]) n = std::max(n, t["id"].get<int32_t>() + 1);
  FixtureVocab out;
  out.tokens.resize(n);
  static const std::vector<int> u2b = unicode_to_byte_table();
  for (auto& [text, id] : entries) {
    std::string bytes;
    if (byte_level) {
      for (size_t i = 0; i < text.size();) {
        unsigned char c = text[i];
        uint32_t cp;
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        i += len;
        BRIOCHE_CHECK(cp < u2b.size() && u2b[cp] >= 0, "byte-level token with char U+", cp);
        bytes += static_cast<char>(u2b[cp]);
      }
    } else if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>') {
      bytes = static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16));
    } else {
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 LOWER ONE EIGHTH BLOCK = space
          bytes += ' ';
          i += 3;
        } else {
          bytes += text[i++];
        }
      }
    }
    out.tokens[id] = std::move(bytes);
  }
  for (auto& t : j["added_tokens"]) {
    int32_t id = t["id"].get<int32_t>();
    if (t.value("special", false)) {
      out.tokens[id].clear();
      out.special.push_back(id);
    } else {
      out.tokens[id] = t["content"].get<std::string>();
    }
  }
  return out;
}

inline std::vector<int32_t> fixture_eos(const std::string& family) {
  if (family == "llama3") return {128001, 128009};
  if (family == "qwen3") return {151643, 151645};
  return {};
}

inline std::shared_ptr<const Vocabulary> fixture_vocabulary(const std::string& family) {
  FixtureVocab fv = load_fixture_vocab(family);
  return std::make_shared<Vocabulary>(std::move(fv.tokens),
                                      VocabularyOptions{.eos_ids = fixture_eos(family), .special_ids = fv.special});
}

// splitmix64 sequence from state 0: the mask-hash multipliers of the goldens.
inline uint64_t splitmix64(uint64_t i) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace brioche::grammar::testing
