// Reads the zstd-compressed corpus and golden files written by
// tools/oracle/tokenizer_goldens.py.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace brioche::tokenizer::testing {

inline std::string source_path(const std::string& relative) { return std::string(BRIOCHE_SOURCE_DIR) + "/" + relative; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Streaming decompression: the zstd CLI does not record the content size when reading stdin.
inline std::string read_zstd_file(const std::string& path) {
  const std::string compressed = read_file(path);
  ZSTD_DStream* stream = ZSTD_createDStream();
  ZSTD_initDStream(stream);
  std::string out;
  std::vector<char> buffer(ZSTD_DStreamOutSize());
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
    const size_t rc = ZSTD_decompressStream(stream, &o, &in);
    if (ZSTD_isError(rc)) {
      ZSTD_freeDStream(stream);
      throw std::runtime_error(path + ": zstd: " + ZSTD_getErrorName(rc));
    }
    out.append(buffer.data(), o.pos);
  }
  ZSTD_freeDStream(stream);
  return out;
}

class ByteReader {
 public:
  explicit ByteReader(std::string data) : data_(std::move(data)) {}
  std::string line() {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string::npos) throw std::runtime_error("golden: missing header line");
    std::string s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  uint32_t u32() {
    uint32_t v;
    need(4);
    std::memcpy(&v, data_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  std::string bytes(size_t n) {
    need(n);
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int32_t> ints(size_t n) {
    need(n * 4);
    std::vector<int32_t> v(n);
    if (n > 0) std::memcpy(v.data(), data_.data() + pos_, n * 4);  // (an empty vector's data() may be null)
    pos_ += n * 4;
    return v;
  }

 private:
  void need(size_t n) const {
    if (pos_ + n > data_.size()) throw std::runtime_error("golden: truncated file");
  }
  std::string data_;
  size_t pos_ = 0;
};

struct Corpus {
  std::string metadata;
  std::vector<std::string> docs;
};

inline Corpus load_corpus() {
  ByteReader r(read_zstd_file(source_path("tests/tokenizer/golden/corpus.bin.zst")));
  Corpus c;
  if (r.line() != "BRIOCHE-TOKCORPUS 1") throw std::runtime_error("corpus: bad magic");
  c.metadata = r.line();
  const uint32_t n = r.u32();
  for (uint32_t i = 0; i < n; ++i) c.docs.push_back(r.bytes(r.u32()));
  return c;
}

struct GoldenDoc {
  std::vector<int32_t> ids;
  bool decode_is_input = true;
  std::string decoded;  // when !decode_is_input
};

struct Golden {
  std::string metadata;  // tool and version
  std::vector<GoldenDoc> docs;
};

inline Golden load_golden(const std::string& name) {
  ByteReader r(read_zstd_file(source_path("tests/tokenizer/golden/" + name + ".ids.bin.zst")));
  Golden g;
  if (r.line() != "BRIOCHE-TOKGOLD 1") throw std::runtime_error("golden: bad magic");
  g.metadata = r.line();
  const uint32_t n = r.u32();
  for (uint32_t i = 0; i < n; ++i) {
    GoldenDoc d;
    d.ids = r.ints(r.u32());
    const uint32_t decoded = r.u32();
    if (decoded != 0xFFFFFFFFu) {
      d.decode_is_input = false;
      d.decoded = r.bytes(decoded);
    }
    g.docs.push_back(std::move(d));
  }
  return g;
}

}  // namespace brioche::tokenizer::testing
