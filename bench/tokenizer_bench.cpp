// Encode throughput of brioche's tokenizer, single-threaded, on a corpus file
// written by bench/tokenizer_bench.py (u32 n_docs, then u32 length + bytes each).
// Usage: tokenizer_bench (--json tokenizer.json | --gguf model.gguf) --corpus docs.bin [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, gguf_path, corpus_path;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--json")
      json_path = argv[i + 1];
    else if (flag == "--gguf")
      gguf_path = argv[i + 1];
    else if (flag == "--corpus")
      corpus_path = argv[i + 1];
    else if (flag == "--repeat")
      repeat = std::atoi(argv[i + 1]);
  }
  if ((json_path.empty() && gguf_path.empty()) || corpus_path.empty()) {
    std::fprintf(stderr, "usage: %s (--json tokenizer.json | --gguf model.gguf) --corpus docs.bin [--repeat N]\n",
                 argv[0]);
    return 2;
  }
  using clock = std::chrono::steady_clock;
  const auto load_start = clock::now();
  std::unique_ptr<brioche::tokenizer::Tokenizer> tok =
      json_path.empty() ? brioche::tokenizer::Tokenizer::from_gguf(*brioche::formats::GgufFile::open(gguf_path))
                        : brioche::tokenizer::Tokenizer::from_tokenizer_json(read_file(json_path));
  const double load_s = std::chrono::duration<double>(clock::now() - load_start).count();

  const std::string raw = read_file(corpus_path);
  std::vector<std::string> docs;
  size_t pos = 0, bytes = 0;
  auto u32 = [&] {
    uint32_t v;
    std::memcpy(&v, raw.data() + pos, 4);
    pos += 4;
    return v;
  };
  const uint32_t n = u32();
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = u32();
    docs.emplace_back(raw.substr(pos, len));
    pos += len;
    bytes += len;
  }
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    tokens = 0;
    const auto start = clock::now();
    for (const std::string& d : docs) tokens += tok->encode(d).size();
    best = std::min(best, std::chrono::duration<double>(clock::now() - start).count());
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f, \"load_seconds\": %.3f}\n",
              bytes, tokens, best, bytes / best / 1e6, load_s);
  return 0;
}
