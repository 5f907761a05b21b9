#include "engine/model_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {

namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const model::Model& model) {
  return load_model_tokenizer(model.gguf(), model.directory());
}

std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const formats::GgufFile* gguf, const std::string& directory) {
  if (gguf != nullptr) return tokenizer::Tokenizer::from_gguf(*gguf);
  std::filesystem::path dir = directory;
  std::string json = read_text_file(dir / "tokenizer.json");
  BRIOCHE_CHECK(!json.empty(), "expected ", (dir / "tokenizer.json").string(), " next to the model's weights");
  return tokenizer::Tokenizer::from_tokenizer_json(json, read_text_file(dir / "tokenizer_config.json"));
}

}  // namespace brioche::engine
