// `brioche info MODEL`: what a checkpoint is, without running it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/env_switch.h"
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

// Elements of a tensor of `shape`, saturating: the readers bound every
// tensor's bytes, but a shape with a zero dim holds none whatever its other
// dims, and their product taken in order could still overflow.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  }
  return n;
}

struct TensorCensus {
  int64_t parameters = 0;
  std::map<std::string, int> tensors_by_dtype;  // "q4_1" -> count

  void add(int64_t n) {
    if (__builtin_add_overflow(parameters, n, &parameters)) parameters = INT64_MAX;
  }
};

TensorCensus census_of_gguf(const formats::GgufFile& gguf) {
  TensorCensus census;
  for (const auto& t : gguf.tensors()) {
    census.add(element_count(t.shape));
    census.tensors_by_dtype[std::string(dtype_name(t.dtype))]++;
  }
  return census;
}

TensorCensus census_of_safetensors(const std::string& dir) {
  TensorCensus census;
  auto st = formats::SafetensorsDir::open(dir);
  for (const auto& name : st.names()) {
    const auto* info = st.file_of(name).find(name);
    int64_t n = element_count(info->shape);
    // MLX packs 32/bits values per uint32 word; count logical parameters.
    if (info->dtype == "U32") {
      std::string prefix = name.substr(0, name.rfind('.'));
      if (auto q = st.quantization(prefix); q && q->bits > 0) n = n * 32 / q->bits;
    }
    if (name.ends_with(".scales") || name.ends_with(".biases")) {
      census.tensors_by_dtype["(quant scales/biases)"]++;
      continue;
    }
    census.add(n);
    census.tensors_by_dtype[info->dtype]++;
  }
  return census;
}

int info(const std::string& path_flag) {
  std::string path = resolve_model_path(path_flag);
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::string tokenizer_line;
  TensorCensus census;
  // Everything that can fail runs before the first line is printed, so that a
  // hostile file gives one line of error, not half a description.
  try {
    model = model::Model::load(path);
    try {
      tok = engine::load_model_tokenizer(model->gguf(), model->directory());
    } catch (const Error& e) {
      tokenizer_line = e.what();  // a checkpoint without a tokenizer (random weights) is still described
    }
    if (tok) {
      engine::check_tokenizer_fits_model(tok->vocab_size(), model->config().vocab_size, path);
      auto name = [&](int32_t id) {
        return id < 0 ? std::string("none") : tok->token_text(id) + " (" + std::to_string(id) + ")";
      };
      tokenizer_line = "vocab " + std::to_string(tok->vocab_size()) + ", bos " + name(tok->bos_id()) + ", eos " +
                       name(tok->eos_id());
    }
    census = model->gguf() ? census_of_gguf(*model->gguf()) : census_of_safetensors(path);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  const auto& c = model->config();

  std::printf("%-14s %s\n", "model", path.c_str());
  if (const formats::GgufFile* gguf = model->gguf()) {
    const formats::GgufValue* name = gguf->find("general.name");
    std::string shown = name != nullptr && name->type() == formats::GgufType::STRING ? name->as_string() : "(unnamed)";
    std::printf("%-14s GGUF v%u, %s\n", "format", gguf->version(), shown.c_str());
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

  std::printf("%-14s %s\n", "tokenizer", tokenizer_line.c_str());
  std::string tmpl = model->chat_template();
  if (tmpl.empty()) {
    std::printf("%-14s none (plain fallback format)\n", "chat template");
  } else {
    std::printf("%-14s present (%zu characters)\n", "chat template", tmpl.size());
  }
  return kExitOk;
}

// `brioche info --env`: every environment variable brioche reads
// (core/env_registry.cpp), its default, its value here, and what it does.
int list_environment() {
  std::printf("%-34s %-8s %-8s %s\n", "variable", "default", "set", "effect");
  for (const EnvVariable& v : env_registry()) {
    const char* set = std::getenv(std::string(v.name).c_str());
    std::printf("%-34.*s %-8.*s %-8s %.*s\n", int(v.name.size()), v.name.data(), int(v.default_value.size()),
                v.default_value.empty() ? "-" : v.default_value.data(), set ? set : "-", int(v.effect.size()),
                v.effect.data());
  }
  return kExitOk;
}

}  // namespace

Subcommand add_info_command(CLI::App& root) {
  auto path = std::make_shared<std::string>();
  auto env = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("info", "describe a model: architecture, sizes, quantization, tokenizer");
  // Positional, or -m like every other subcommand.
  app->add_option("-m,--model,model", *path, "GGUF file or safetensors directory (default: the default model)");
  app->add_flag("--env", *env, "list the environment variables brioche reads (name, default, value here, effect)");
  return {app, [path, env] { return *env ? list_environment() : info(*path); }};
}

}  // namespace brioche::cli
