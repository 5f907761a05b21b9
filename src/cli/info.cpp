// `brioche info MODEL`: what a checkpoint is, without running it.
#include <cstdio>
#include <map>
#include <string>

#include "cli/common.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "engine/model_tokenizer.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::cli {

namespace {

struct TensorCensus {
  int64_t parameters = 0;
  std::map<std::string, int> tensors_by_dtype;  // "q4_1" -> count
};

TensorCensus census_of_gguf(const formats::GgufFile& gguf) {
  TensorCensus census;
  for (const auto& t : gguf.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    census.parameters += n;
    census.tensors_by_dtype[std::string(dtype_name(t.dtype))]++;
  }
  return census;
}

TensorCensus census_of_safetensors(const std::string& dir) {
  TensorCensus census;
  auto st = formats::SafetensorsDir::open(dir);
  for (const auto& name : st.names()) {
    const auto* info = st.file_of(name).find(name);
    int64_t n = 1;
    for (int64_t d : info->shape) n *= d;
    // MLX packs 32/bits values per uint32 word; count logical parameters.
    if (info->dtype == "U32") {
      std::string prefix = name.substr(0, name.rfind('.'));
      if (auto q = st.quantization(prefix)) n = n * 32 / q->bits;
    }
    if (name.ends_with(".scales") || name.ends_with(".biases")) {
      census.tensors_by_dtype["(quant scales/biases)"]++;
      continue;
    }
    census.parameters += n;
    census.tensors_by_dtype[info->dtype]++;
  }
  return census;
}

int info(const std::string& path_flag) {
  std::string path = resolve_model_path(path_flag);
  std::unique_ptr<model::Model> model;
  try {
    model = model::Model::load(path);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  const auto& c = model->config();
  TensorCensus census = model->gguf() ? census_of_gguf(*model->gguf()) : census_of_safetensors(path);

  std::printf("%-14s %s\n", "model", path.c_str());
  if (model->gguf()) {
    std::printf("%-14s GGUF v%u, %s\n", "format", model->gguf()->version(),
                model->gguf()->get_string("general.name", "(unnamed)").c_str());
  } else {
    std::printf("%-14s safetensors directory\n", "format");
  }
  std::printf("%-14s %s\n", "architecture", c.architecture.c_str());
  std::printf("%-14s %.1f M (%.1f MiB of weights)\n", "parameters", census.parameters / 1e6,
              model->weight_bytes() / 1048576.0);
  std::printf("%-14s %d layers, hidden %d, intermediate %d, vocab %d\n", "shape", c.n_layers, c.hidden_size,
              c.intermediate_size, c.vocab_size);
  std::printf("%-14s %d query heads, %d kv heads%s, head dim %d%s%s\n", "attention", c.n_heads, c.n_kv_heads,
              c.n_kv_heads < c.n_heads ? " (GQA)" : "", c.head_dim, c.qkv_bias ? ", qkv bias" : "",
              c.qk_norm ? ", q/k norm" : "");
  const char* scaling = c.rope.scaling.kind == ops::RopeScalingKind::Llama3   ? ", llama3 scaling"
                        : c.rope.scaling.kind == ops::RopeScalingKind::Linear ? ", linear scaling"
                                                                               : "";
  std::printf("%-14s theta %g, %s%s\n", "rope", c.rope.theta,
              c.rope.style == ops::RopeStyle::NeoX ? "neox (rotate half)" : "interleaved pairs", scaling);
  std::printf("%-14s %d tokens%s\n", "context", c.max_context, c.tied_embeddings ? ", tied embeddings" : "");
  std::string dtypes;
  for (const auto& [name, count] : census.tensors_by_dtype) {
    dtypes += (dtypes.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  std::printf("%-14s %s\n", "tensors", dtypes.c_str());

  std::unique_ptr<tokenizer::Tokenizer> tok;
  try {
    tok = engine::load_model_tokenizer(*model);
  } catch (const Error& e) {
    std::printf("%-14s %s\n", "tokenizer", e.what());
  }
  if (tok) {
    auto name = [&](int32_t id) { return id < 0 ? std::string("none") : tok->token_text(id) + " (" + std::to_string(id) + ")"; };
    std::printf("%-14s vocab %d, bos %s, eos %s\n", "tokenizer", tok->vocab_size(), name(tok->bos_id()).c_str(),
                name(tok->eos_id()).c_str());
  }
  std::string tmpl = model->chat_template();
  if (tmpl.empty()) {
    std::printf("%-14s none (plain fallback format)\n", "chat template");
  } else {
    std::printf("%-14s present (%zu characters)\n", "chat template", tmpl.size());
  }
  return kExitOk;
}

}  // namespace

Subcommand add_info_command(CLI::App& root) {
  auto path = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("info", "describe a model: architecture, sizes, quantization, tokenizer");
  app->add_option("model", *path, "GGUF file or safetensors directory (default: the default model)");
  return {app, [path] { return info(*path); }};
}

}  // namespace brioche::cli
