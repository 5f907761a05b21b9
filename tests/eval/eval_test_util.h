// Test helpers for eval/: source paths and zstd goldens.
#pragma once

#include <zstd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "eval/python_text.h"

namespace brioche::eval::testing {

inline std::string source_path(const std::string& rel) { return std::string(BRIOCHE_SOURCE_DIR) + "/" + rel; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRIOCHE_CHECK(in.good(), "cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string read_zstd(const std::string& path) {
  const std::string packed = read_file(path);
  std::string out;
  ZSTD_DStream* stream = ZSTD_createDStream();
  ZSTD_initDStream(stream);
  ZSTD_inBuffer in{packed.data(), packed.size(), 0};
  std::vector<char> buffer(1 << 20);
  size_t status = 1;
  while (in.pos < in.size || status != 0) {
    ZSTD_outBuffer chunk{buffer.data(), buffer.size(), 0};
    status = ZSTD_decompressStream(stream, &chunk, &in);
    if (ZSTD_isError(status)) {
      ZSTD_freeDStream(stream);
      throw brioche::Error(std::string(path) + ": zstd: " + ZSTD_getErrorName(status));
    }
    out.append(buffer.data(), chunk.pos);
    if (chunk.pos == 0 && in.pos == in.size) break;
  }
  ZSTD_freeDStream(stream);
  return out;
}

}  // namespace brioche::eval::testing

namespace brioche::eval {
inline std::vector<std::string_view> split_lines(std::string_view text) { return split_on(text, "\n"); }
}  // namespace brioche::eval
