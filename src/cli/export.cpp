// `brioche export`: a LoRA adapter merged into its base model and written as
// one model file (what Unsloth's save_pretrained_gguf and mlx-lm's fuse do),
// for runtimes that take no adapters or to skip the merge at every load.
//
// The base's GGUF is copied key for key and tensor for tensor (zero-copy
// views); only the adapted projections are replaced by W + s·B·A, written
// in --type: the base tensor's own type by default (the file keeps its size;
// a quantized type re-quantizes the merged weight), or f32/f16/bf16 to keep
// the merge exact.
#include <filesystem>
#include <thread>

#include "cli/common.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/weights.h"
#include "ops/quantize.h"
#include "train/adapter_io.h"
#include "train/lora_tensors.h"

namespace brioche::cli {

namespace {

struct ExportFlags {
  std::string model, adapter, output, type = "stored";
  int threads = 0;
};

int run_export(const ExportFlags& f) {
  ThreadPool::configure_global(f.threads > 0 ? f.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  const std::string path = resolve_model_path(f.model);
  if (std::filesystem::is_directory(path))
    throw UsageError{"export: " + path + " is a safetensors directory; export writes GGUF from a GGUF base (merge a "
                     "safetensors base with `peft`'s merge_and_unload, or load it with --adapter)"};
  DType target = DType::F32;
  if (f.type != "stored" && !parse_dtype(f.type, &target))
    throw UsageError{"--type: expected stored, f32, f16, bf16 or a GGUF quantized type (q8_0, q4_k, ...), got '" +
                     f.type + "'"};
  if (std::filesystem::exists(f.output)) throw UsageError{"--output " + f.output + " exists; choose another path"};

  model::Checkpoint ck = model::load_gguf_checkpoint(path);
  std::unique_ptr<train::LoraAdapter> adapter = train::load_adapter(f.adapter, ck);
  for (const auto& e : adapter->entries()) {
    const std::string name = train::gguf_weight_name(e.layer, e.module);
    BRIOCHE_CHECK(ck.gguf->find_tensor(name) != nullptr, path, ": no tensor ", name, " to merge into");
  }
  const int merged = train::merge_adapter(ck, *adapter);  // the adapted projections become f32 W + s·B·A

  formats::GgufWriter out;
  for (const auto& [key, value] : ck.gguf->metadata()) {
    if (key == "general.name") {
      out.add(key, formats::GgufValue::string(value.as_string() + " + " +
                                               std::filesystem::path(f.adapter).filename().string()));
    } else {
      out.add(key, value);
    }
  }
  std::vector<Tensor> converted;  // kept alive until the write
  converted.reserve(ck.gguf->tensors().size());
  auto merged_weight = [&](const std::string& name) -> const Tensor* {
    for (const auto& e : adapter->entries()) {
      if (train::gguf_weight_name(e.layer, e.module) != name) continue;
      model::LayerWeights& w = ck.weights.layers[size_t(e.layer)];
      Tensor* targets[] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
      return targets[size_t(e.module)];
    }
    return nullptr;
  };
  for (const formats::GgufTensorInfo& info : ck.gguf->tensors()) {
    const Tensor* m = merged_weight(info.name);
    if (m == nullptr) {
      out.add_tensor(info.name, ck.gguf->tensor(info.name));
      continue;
    }
    const DType type = f.type == "stored" ? info.dtype : target;
    converted.push_back(type == DType::F32 ? *m : ops::convert(*m, type));
    out.add_tensor(info.name, converted.back());
  }
  out.write(f.output);
  std::printf("merged %d projections of %s into %s: %s (%s, %.1f MB)\n", merged, f.adapter.c_str(), path.c_str(),
              f.output.c_str(), f.type == "stored" ? "merged tensors in the base's types" : f.type.c_str(),
              double(std::filesystem::file_size(f.output)) / 1e6);
  return kExitOk;
}

}  // namespace

Subcommand add_export_command(CLI::App& root) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* app = root.add_subcommand("export", "merge a LoRA adapter into its base model and write one GGUF file");
  app->add_option("-m,--model", flags->model, "base GGUF file (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option("--adapter", flags->adapter, "PEFT adapter folder or GGUF LoRA file")->required();
  app->add_option("-o,--output", flags->output, "the merged model's .gguf path (must not exist)")->required();
  app->add_option("--type", flags->type,
                  "type of the merged tensors: stored (the base tensor's, default), f32, f16, bf16, q8_0, q4_k, ...")
      ->capture_default_str();
  app->add_option("-t,--threads", flags->threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
  return {app, [flags] { return run_export(*flags); }};
}

}  // namespace brioche::cli
