// `brioche export`: a LoRA adapter merged into its base model and written as
// one model file (what Unsloth's save_pretrained_gguf and mlx-lm's fuse do),
// or as a Hugging Face folder (Unsloth's save_pretrained_merged), for
// runtimes that take no adapters or to skip the merge at every load.
//
// GGUF (-o NAME.gguf, from a GGUF base): the base's GGUF is copied key for
// key and tensor for tensor (zero-copy views); only the adapted projections
// are replaced by W + s·B·A, written in --type: the base tensor's own type by
// default (the file keeps its size; a quantized type re-quantizes the merged
// weight), or f32/f16/bf16 to keep the merge exact.
//
// Hugging Face folder (-o DIR, or --format hf; GGUF or safetensors base):
// config.json, model.safetensors in --type bf16 (default), f16 or f32
// (model/hf_export.h: quantized blocks dequantized, llama Q/K rows back in
// Hugging Face's order), and the tokenizer: the base folder's own files, or
// from a GGUF tokenizer.json + tokenizer_config.json rebuilt from its
// metadata (tokenizer/hf_tokenizer_files.h), or --tokenizer-from DIR's files.
// --unmerged writes the base alone and the adapter beside it in DIR/adapter,
// naming DIR as its base_model_name_or_path, so `peft` loads it offline.
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/hf_export.h"
#include "model/weights.h"
#include "tokenizer/hf_tokenizer_files.h"
#include "ops/quantize.h"
#include "train/adapter_io.h"
#include "train/lora_tensors.h"

namespace brioche::cli {

namespace {

struct ExportFlags {
  std::string model, adapter, output, type, format = "auto", tokenizer_from;
  bool unmerged = false;
  int threads = 0;
};

namespace fs = std::filesystem;

// The tokenizer's files of a Hugging Face folder (whichever it has).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",      "tokenizer_config.json", "special_tokens_map.json",
                                           "chat_template.jinja", "tokenizer.model",       "vocab.json",
                                           "merges.txt",          "added_tokens.json",     "generation_config.json"};

int copy_tokenizer_files(const std::string& from, const std::string& to) {
  int copied = 0;
  for (const char* name : kTokenizerFiles) {
    if (!fs::is_regular_file(fs::path(from) / name)) continue;
    fs::copy_file(fs::path(from) / name, fs::path(to) / name);
    ++copied;
  }
  return copied;
}

int run_export_hf(const ExportFlags& f, const std::string& path) {
  DType dtype = DType::BF16;
  const std::string type = f.type.empty() ? "bf16" : f.type;
  if (!parse_dtype(type, &dtype) || (dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F32))
    throw UsageError{"--type: a Hugging Face folder takes bf16, f16 or f32, got '" + type + "'"};
  if (fs::exists(f.output)) throw UsageError{"--output " + f.output + " exists; choose another path"};
  if (!f.tokenizer_from.empty() && !fs::is_regular_file(fs::path(f.tokenizer_from) / "tokenizer.json") &&
      !fs::is_regular_file(fs::path(f.tokenizer_from) / "tokenizer.model"))
    throw UsageError{"--tokenizer-from " + f.tokenizer_from +
                     ": expected a folder with tokenizer.json or "
                     "tokenizer.model, found none"};
  if (f.unmerged && f.adapter.empty())
    throw UsageError{"--unmerged: give the adapter to write beside the base (--adapter)"};
  const bool gguf = !fs::is_directory(path);
  model::Checkpoint ck = gguf ? model::load_gguf_checkpoint(path) : model::load_safetensors_checkpoint(path);
  int merged = 0;
  std::unique_ptr<train::LoraAdapter> adapter;
  if (!f.adapter.empty()) adapter = train::load_adapter(f.adapter, ck);
  if (adapter && !f.unmerged) merged = train::merge_adapter(ck, *adapter);
  // The tokenizer first: an unsupported one fails before anything is written.
  std::optional<tokenizer::HfTokenizerFiles> rebuilt;
  if (f.tokenizer_from.empty() && gguf) rebuilt = tokenizer::hf_tokenizer_files(*ck.gguf, ck.config.max_context);
  int bos = -1, eos = -1;
  if (gguf) {
    bos = int(ck.gguf->get_int("tokenizer.ggml.bos_token_id", -1));
    eos = int(ck.gguf->get_int("tokenizer.ggml.eos_token_id", -1));
  }
  const size_t bytes =
      model::write_hf_model(ck, {.directory = f.output, .dtype = dtype, .bos_token_id = bos, .eos_token_id = eos});
  std::string tokenizer_note;
  if (!f.tokenizer_from.empty()) {
    tokenizer_note =
        std::to_string(copy_tokenizer_files(f.tokenizer_from, f.output)) + " tokenizer files from " + f.tokenizer_from;
  } else if (rebuilt) {
    std::ofstream(fs::path(f.output) / "tokenizer.json") << rebuilt->tokenizer.dump() << "\n";
    std::ofstream(fs::path(f.output) / "tokenizer_config.json") << rebuilt->tokenizer_config.dump(2) << "\n";
    tokenizer_note = "tokenizer.json rebuilt from the GGUF";
  } else {
    tokenizer_note = std::to_string(copy_tokenizer_files(path, f.output)) + " tokenizer files from the base";
  }
  if (f.unmerged) {
    // The adapter written again in the PEFT layout (a PEFT folder or a GGUF
    // LoRA file alike), naming this folder as the base peft resolves.
    const std::string folder = fs::absolute(f.output).lexically_normal().string();
    train::save_adapter((fs::path(f.output) / "adapter").string(), *adapter, ck,
                        {.base_model_id = folder, .base_model_path = folder});
  }
  std::printf("%s %s: %s (Hugging Face folder, %s, model.safetensors %.1f MB, %s)%s\n",
              f.unmerged   ? "wrote the base of"
              : merged > 0 ? "merged"
                           : "converted",
              f.unmerged || merged == 0
                  ? path.c_str()
                  : (std::to_string(merged) + " projections of " + f.adapter + " into " + path).c_str(),
              f.output.c_str(), type.c_str(), double(bytes) / 1e6, tokenizer_note.c_str(),
              f.unmerged ? ("; the adapter in " + (fs::path(f.output) / "adapter").string()).c_str() : "");
  return kExitOk;
}

int run_export(const ExportFlags& f) {
  ThreadPool::configure_global(f.threads > 0 ? f.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  const std::string path = resolve_model_path(f.model);
  if (f.format != "auto" && f.format != "gguf" && f.format != "hf")
    throw UsageError{"--format: expected auto, gguf or hf, got '" + f.format + "'"};
  const bool hf = f.format == "hf" || (f.format == "auto" && fs::path(f.output).extension() != ".gguf");
  if (hf) return run_export_hf(f, path);
  if (f.adapter.empty())
    throw UsageError{
        "a GGUF (-o NAME.gguf) is written from a base and --adapter; a Hugging Face folder (-o DIR) can be the base "
        "alone"};
  if (!f.tokenizer_from.empty() || f.unmerged)
    throw UsageError{"--tokenizer-from and --unmerged are for Hugging Face folders (-o DIR or --format hf)"};
  if (std::filesystem::is_directory(path))
    throw UsageError{path +
                     " is a safetensors directory; a GGUF is written from a GGUF base (write a "
                     "Hugging Face folder instead: -o DIR)"};
  const std::string type = f.type.empty() ? "stored" : f.type;
  DType target = DType::F32;
  if (type != "stored" && !parse_dtype(type, &target))
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
    const DType out_type = type == "stored" ? info.dtype : target;
    converted.push_back(out_type == DType::F32 ? *m : ops::convert(*m, out_type));
    out.add_tensor(info.name, converted.back());
  }
  out.write(f.output);
  std::printf("merged %d projections of %s into %s: %s (%s, %.1f MB)\n", merged, f.adapter.c_str(), path.c_str(),
              f.output.c_str(), type == "stored" ? "merged tensors in the base's types" : type.c_str(),
              double(std::filesystem::file_size(f.output)) / 1e6);
  return kExitOk;
}

}  // namespace

Subcommand add_export_command(CLI::App& root) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* app = root.add_subcommand(
      "export", "merge a LoRA adapter into its base model and write one GGUF file or a Hugging Face folder");
  app->add_option("-m,--model", flags->model,
                  "base GGUF file or safetensors folder (default: SmolLM2-135M-Instruct Q4_1)");
  app->add_option("--adapter", flags->adapter,
                  "PEFT adapter folder or GGUF LoRA file (a Hugging Face folder may omit it: "
                  "the base converted)");
  app->add_option("-o,--output", flags->output,
                  "NAME.gguf: one GGUF file; any other path: a Hugging Face folder (must not exist)")
      ->required();
  app->add_option("--format", flags->format, "auto (from --output), gguf or hf")->capture_default_str();
  app->add_option("--type", flags->type,
                  "merged tensors' type: GGUF stored (the base tensor's, default), f32, f16, bf16, q8_0, q4_k, ...; "
                  "Hugging Face folder bf16 (default), f16 or f32");
  app->add_option("--tokenizer-from", flags->tokenizer_from,
                  "Hugging Face folder whose tokenizer files to copy (default: the base's, or rebuilt from the GGUF)");
  app->add_flag("--unmerged", flags->unmerged,
                "Hugging Face folder: the base alone, and the adapter in OUTPUT/adapter naming it as its base");
  app->add_option("-t,--threads", flags->threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
  return {app, [flags] { return run_export(*flags); }};
}

}  // namespace brioche::cli
