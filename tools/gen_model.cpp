// gen_model: writes a random-weight model in a real architecture's shape as
// GGUF, or as a Hugging Face directory of safetensors (bf16, f16, f32, or an
// MLX affine type as MLX writes it), for speed tests where no model can be
// downloaded. An --out ending in .gguf writes GGUF; anything else is a
// directory (tools/gen_model_safetensors.h).
//
//   gen_model --shape llama3-8b --dtype q4_k --out /tmp/llama3-8b-q4_k.gguf
//   gen_model --shape llama3.2-1b --dtype affine4_g64 --out /tmp/llama1b-mlx4
//
// With a real tokenizer, so that `brioche run/serve` work end to end on the
// random model (the text is nonsense; the paths are the real ones):
//   gen_model --tokenizer-only --tokenizer-from SmolLM2.gguf --out tok.gguf   (small, carried)
//   gen_model --shape smollm2-135m --tokenizer-from tok.gguf --out model.gguf
// --tokenizer-from copies every tokenizer.* key of that GGUF; for a directory
// it is a directory whose tokenizer.json (and tokenizer_config.json) are copied.
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "tools/gen_model_lib.h"
#include "tools/gen_model_safetensors.h"

namespace {

std::vector<std::pair<std::string, brioche::formats::GgufValue>> tokenizer_metadata(const std::string& path) {
  auto file = brioche::formats::GgufFile::open(path);
  std::vector<std::pair<std::string, brioche::formats::GgufValue>> out;
  for (const auto& [key, value] : file->metadata())
    if (key.starts_with("tokenizer.")) out.emplace_back(key, value);
  if (out.empty()) brioche::fail(path, ": no tokenizer.* metadata to copy");
  return out;
}

// A safetensors directory's --tokenizer-from: a directory with tokenizer.json.
void require_tokenizer_dir(const std::string& from) {
  if (!std::filesystem::is_regular_file(std::filesystem::path(from) / "tokenizer.json"))
    brioche::fail("--tokenizer-from ", from,
                  ": expected a directory with tokenizer.json for a safetensors "
                  "directory, found none");
}

// tokenizer.json and tokenizer_config.json (if there) from the directory
// `from` into the directory `to`.
void copy_tokenizer_files(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::exists(fs::path(from) / name)) continue;
    fs::copy_file(fs::path(from) / name, fs::path(to) / name, fs::copy_options::overwrite_existing);
    fs::permissions(fs::path(to) / name, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace brioche;
  std::string shape, dtype_text = "bf16", out, tokenizer_from;
  bool tokenizer_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--tokenizer-only") {
      tokenizer_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gen_model: flag %s needs a value\n", flag.c_str());
      return 2;
    }
    std::string value = argv[++i];
    if (flag == "--shape")
      shape = value;
    else if (flag == "--dtype")
      dtype_text = value;
    else if (flag == "--out")
      out = value;
    else if (flag == "--tokenizer-from")
      tokenizer_from = value;
    else {
      std::fprintf(stderr, "gen_model: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (out.empty() || (shape.empty() && !tokenizer_only) || (tokenizer_only && tokenizer_from.empty())) {
    std::fprintf(stderr,
                 "usage: gen_model --shape NAME [--dtype DTYPE] [--tokenizer-from FILE.gguf] --out FILE.gguf\n"
                 "       gen_model --shape NAME [--dtype DTYPE] [--tokenizer-from DIR] --out DIR\n"
                 "       gen_model --tokenizer-only --tokenizer-from FILE.gguf --out FILE.gguf\n  shapes:");
    for (const auto& p : tools::shape_presets()) std::fprintf(stderr, " %s", p.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  try {
    if (tokenizer_only) {
      formats::GgufWriter writer;
      const auto keys = tokenizer_metadata(tokenizer_from);
      for (auto& [key, value] : keys) writer.add(key, value);
      writer.write(out);
      std::printf("wrote %s (%zu tokenizer keys from %s)\n", out.c_str(), keys.size(), tokenizer_from.c_str());
      return 0;
    }
    DType dtype;
    if (!parse_dtype(dtype_text, &dtype)) fail("unknown dtype '", dtype_text, "'");
    // (The tokenizer is checked before the model is generated.)
    const bool gguf = out.ends_with(".gguf");
    std::vector<std::pair<std::string, formats::GgufValue>> extra;
    if (!tokenizer_from.empty()) {
      if (gguf)
        extra = tokenizer_metadata(tokenizer_from);
      else
        require_tokenizer_dir(tokenizer_from);
    }
    const model::Checkpoint ck = tools::random_checkpoint(tools::find_shape(shape), dtype);
    if (!gguf) {
      tools::write_safetensors_dir(ck, out);
      if (!tokenizer_from.empty()) copy_tokenizer_files(tokenizer_from, out);
      std::printf("wrote %s/ (%s, %s, safetensors%s)\n", out.c_str(), shape.c_str(), dtype_text.c_str(),
                  tokenizer_from.empty() ? ", no tokenizer" : ", with a real tokenizer");
      return 0;
    }
    if (extra.empty()) {
      // llama.cpp's "no vocabulary" keys: it then loads the file with dummy
      // tokens (llama-bench feeds random ids) instead of refusing a GGUF
      // without tokenizer.* keys. brioche's tokenizer still needs a real one.
      extra.emplace_back("tokenizer.ggml.model", formats::GgufValue::string("none"));
      extra.emplace_back(ck.config.architecture + ".vocab_size",
                         formats::GgufValue::integer(formats::GgufType::U32, ck.config.vocab_size));
    }
    tools::write_gguf(ck, out, extra);
    std::printf("wrote %s (%s, %s%s)\n", out.c_str(), shape.c_str(), dtype_text.c_str(),
                tokenizer_from.empty() ? ", no vocabulary" : ", with a real tokenizer");
  } catch (const std::exception& e) {  // brioche::Error, and std::filesystem's errors
    std::fprintf(stderr, "gen_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
