// llama.cpp's GGUF LoRA files (its convert_lora_to_gguf.py writes them from
// a PEFT adapter; llama-server --lora and llama-export-lora read them):
//   general.type = "adapter", adapter.type = "lora", adapter.lora.alpha (f32),
//   general.architecture = the base's ("llama", "qwen2", "qwen3", "gemma4", ...);
//   blk.N.<attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down>.weight.lora_a  ne [in, r]
//   ...weight.lora_b                                                                 ne [r, out]
// i.e. PEFT's A [r, in] and B [out, r] row-major, untransposed. The scale is
// alpha / r, or 1 when alpha is 0 (llama.cpp's rule; its converter ignores
// use_rslora). Like a "llama" base converted by llama.cpp, q/k B rows come
// interleaved for RoPE; they are put in Hugging Face order when the base is
// not (a safetensors base). Gemma 4's converter renames only, and its layers
// differ (head dims, kv heads, no k/v in KV-shared layers, no v with
// attention_k_eq_v): each tensor is checked against its layer's shape.
//
// Stricter than llama.cpp where it would guess: a missing adapter.lora.alpha
// (llama.cpp takes scale 1; its converter always writes the key) and any
// tensor that is not a projection's factor (llama.cpp skips "_norm.weight"
// tensors mergekit adds, so the adapter applies partly) are refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "formats/gguf.h"
#include "train/adapter_io.h"
#include "train/lora_tensors.h"

namespace brioche::train {

namespace {

std::string lora_tensor(int layer, Module m, const char* ab) { return gguf_weight_name(layer, m) + "." + ab; }

std::string text_key(const formats::GgufFile& f, std::string_view key) {
  const formats::GgufValue* v = f.find(key);
  return v != nullptr && v->type() == formats::GgufType::STRING ? v->as_string() : std::string();
}

}  // namespace

bool is_gguf_adapter_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::unique_ptr<LoraAdapter> load_gguf_adapter(const std::string& path, const model::ModelConfig& config,
                                               bool base_permuted_qk, int max_rank, const LoraShapes& shapes) {
  auto file = formats::GgufFile::open(path);
  const std::string general_type = text_key(*file, "general.type");
  BRIOCHE_CHECK(
      general_type == "adapter" && text_key(*file, "adapter.type") == "lora", path,
      ": expected a GGUF LoRA adapter (general.type \"adapter\", adapter.type \"lora\"), found general.type \"",
      general_type, "\" and adapter.type \"", text_key(*file, "adapter.type"), "\"");
  BRIOCHE_CHECK(!config.architecture.starts_with("qwen3_5"), path,
                ": GGUF LoRA files are not read for Qwen 3.5 (its gated q and linear-attention projections have no "
                "checked GGUF layout); use the PEFT adapter folder");
  const std::string arch = text_key(*file, "general.architecture");
  BRIOCHE_CHECK(arch == config.architecture, path, ": an adapter for architecture '", arch, "', the model is '",
                config.architecture, "'");
  const formats::GgufValue* alpha_value = file->find("adapter.lora.alpha");
  BRIOCHE_CHECK(alpha_value != nullptr, path,
                ": metadata 'adapter.lora.alpha' expected (llama.cpp's convert_lora_to_gguf.py writes PEFT's "
                "lora_alpha there), found absent");
  const double alpha = alpha_value->as_float();
  BRIOCHE_CHECK(std::isfinite(alpha), path, ": adapter.lora.alpha is not finite");

  std::vector<LoraAdapter::Site> sites;
  std::unordered_set<std::string> known;  // every tensor name a site reads
  int64_t rank = 0;
  for (int l = 0; l < config.n_layers; ++l) {
    for (int m = 0; m < kLlamaModules; ++m) {
      const formats::GgufTensorInfo* a = file->find_tensor(lora_tensor(l, Module(m), "lora_a"));
      const formats::GgufTensorInfo* b = file->find_tensor(lora_tensor(l, Module(m), "lora_b"));
      BRIOCHE_CHECK((a == nullptr) == (b == nullptr), path, ": ", lora_tensor(l, Module(m), a ? "lora_b" : "lora_a"),
                    " is missing");
      if (a == nullptr) continue;
      BRIOCHE_CHECK(!shapes || shapes(l, Module(m)).in > 0, path, ": tensor '", lora_tensor(l, Module(m), "lora_a"),
                    "' adapts a projection that layer ", l, " of this model does not have");
      const Tensor at = file->tensor(lora_tensor(l, Module(m), "lora_a"));
      BRIOCHE_CHECK(at.rank() == 2, path, ": ", lora_tensor(l, Module(m), "lora_a"),
                    " is not a matrix: ", at.describe());
      BRIOCHE_CHECK(rank == 0 || at.dim(0) == rank, path, ": ", lora_tensor(l, Module(m), "lora_a"), " has rank ",
                    at.dim(0), ", other tensors ", rank, " (one rank per adapter)");
      rank = at.dim(0);
      sites.push_back({l, Module(m)});
      known.insert(lora_tensor(l, Module(m), "lora_a"));
      known.insert(lora_tensor(l, Module(m), "lora_b"));
    }
  }
  for (const formats::GgufTensorInfo& t : file->tensors())
    BRIOCHE_CHECK(known.count(t.name) != 0, path, ": tensor '", t.name,
                  "' is not a LoRA factor brioche applies (expected blk.N.<attn_q|attn_k|attn_v|attn_output|ffn_gate|",
                  "ffn_up|ffn_down>.weight.lora_a/.lora_b for N < ", config.n_layers, ")");
  BRIOCHE_CHECK(!sites.empty(), path, ": no LoRA tensors named blk.N.<projection>.weight.lora_a");
  BRIOCHE_CHECK(rank >= 1 && rank <= max_rank, path, ": rank ", rank, " outside [1, ", max_rank, "]");

  LoraConfig lora;
  lora.rank = int(rank);
  lora.alpha = alpha == 0 ? float(rank) : float(alpha);  // scale 1 with alpha 0, as llama.cpp
  lora.targets.clear();
  for (const auto& s : sites)
    if (std::find(lora.targets.begin(), lora.targets.end(), s.module) == lora.targets.end())
      lora.targets.push_back(s.module);
  auto adapter = std::make_unique<LoraAdapter>(config, lora, sites, shapes);
  const bool lora_permuted = arch == "llama";
  for (auto& e : adapter->entries()) {
    for (const char* ab : {"lora_a", "lora_b"}) {
      const std::string name = lora_tensor(e.layer, e.module, ab);
      const Tensor t = file->tensor(name);
      Tensor& dst = ab[5] == 'a' ? e.factors->a : e.factors->b;
      BRIOCHE_CHECK(t.rank() == 2 && t.dim(0) == dst.dim(0) && t.dim(1) == dst.dim(1), path, ": tensor '", name,
                    "' expected shape [", dst.dim(0), ", ", dst.dim(1), "], found ", t.describe());
      Tensor f = factor_f32(t, path, name);
      if (ab[5] == 'b' && permuted_module(e.module) && lora_permuted && !base_permuted_qk)
        f = reorder_rows(f, config.head_dim, /*to_hf=*/true);
      std::memcpy(dst.data(), f.data(), f.nbytes());
    }
  }
  return adapter;
}

}  // namespace brioche::train
