#include "train/adapter_io.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "core/json_limits.h"
#include "formats/gguf.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "ops/device.h"
#include "ops/quantize.h"
#include "ops/scaled_add.h"
#include "train/lora_tensors.h"

namespace brioche::train {

namespace {

// Where peft puts the decoder layers: "model.layers" of a ...ForCausalLM; a
// Gemma4ForConditionalGeneration keeps its text model under "model.language_model".
constexpr const char* kLayers = "base_model.model.model.layers.";
constexpr const char* kLanguageModelLayers = "base_model.model.model.language_model.layers.";

// Where peft finds module m inside a decoder layer of this model: Qwen 3.5 MoE's gate/up/down are the shared
// expert's; the experts' 3-D parameters are wrapped on their module (Gemma 4: layers.N.experts, Qwen 3.5:
// layers.N.mlp.experts).
std::string module_path(const model::ModelConfig& c, Module m) {
  const std::string name(module_name(m));
  switch (m) {
    case Module::Gate:
    case Module::Up:
    case Module::Down: return (c.architecture == "qwen3_5_moe" ? "mlp.shared_expert." : "mlp.") + name;
    case Module::SharedExpertGate: return "mlp." + name;
    case Module::ExpertGateUp:
    case Module::ExpertDown: return c.architecture == "gemma4" ? "experts" : "mlp.experts";
    default: return std::string(module_parent(m)) + "." + name;
  }
}

// peft nests one ParamWrapper per targeted parameter of a module, in the order the module registers them:
// with both expert parameters targeted, gate_up_proj's wrapper is the inner one (experts.base_layer.lora_A)
// and down_proj's the outer (experts.lora_A); with one, it is experts.lora_A.
struct ExpertNesting {
  bool both = false;
};

std::string tensor_name(const model::ModelConfig& c, int layer, Module m, const char* ab, const char* layers,
                        ExpertNesting nesting = {}) {
  const bool inner = m == Module::ExpertGateUp && nesting.both;
  return layers + std::to_string(layer) + "." + module_path(c, m) + (inner ? ".base_layer." : ".") + ab + ".weight";
}

}  // namespace

std::string peft_tensor_name(const model::ModelConfig& config, const LoraAdapter& adapter, int layer, Module m,
                             const char* ab, bool language_model) {
  const ExpertNesting nesting{.both = adapter.factors(layer, Module::ExpertGateUp) &&
                                      adapter.factors(layer, Module::ExpertDown)};
  return tensor_name(config, layer, m, ab, language_model ? kLanguageModelLayers : kLayers, nesting);
}

namespace {
bool permuted_qk(bool from_gguf, const model::ModelConfig& c) {
  return from_gguf && c.architecture == "llama" && c.rope.style == ops::RopeStyle::Interleaved;
}
}  // namespace

bool has_permuted_qk(const model::Checkpoint& ck) { return permuted_qk(ck.gguf != nullptr, ck.config); }

namespace {
// "org/name" as the Hub spells repository ids, from an id or a Hub URL.
std::string repo_id_from(std::string text) {
  for (const char* prefix : {"https://huggingface.co/", "http://huggingface.co/", "hf.co/", "https://hf.co/"})
    if (text.starts_with(prefix)) text.erase(0, std::strlen(prefix));
  while (!text.empty() && text.back() == '/') text.pop_back();
  const size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size() ||
      text.find('/', slash + 1) != std::string::npos)
    return "";
  if (text.front() == '.' || text.size() > 200) return "";
  for (char c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '/' && c != '-' && c != '_' && c != '.') return "";
  return text;
}
}  // namespace

std::string huggingface_repo_id(const model::Checkpoint& ck) {
  if (ck.gguf) {
    for (const char* key : {"general.source.huggingface.repository", "general.base_model.0.repo_url",
                            "general.source.url", "general.url"})
      if (std::string id = repo_id_from(ck.gguf->get_string(key, "")); !id.empty()) return id;
    return "";
  }
  return huggingface_repo_id(ck.directory);
}

std::string huggingface_repo_id(const std::string& directory) {
  if (directory.empty()) return "";
  auto text = formats::read_regular_file_if_present(directory + "/config.json", formats::kMaxConfigJsonBytes);
  if (!text) return "";
  try {
    const nlohmann::json cfg = parse_json_bounded(*text, directory + "/config.json");
    if (cfg.is_object() && cfg.contains("_name_or_path") && cfg["_name_or_path"].is_string())
      return repo_id_from(cfg["_name_or_path"].get<std::string>());
  } catch (const Error&) {
  }
  return "";
}
bool has_permuted_qk(const model::Model& m) { return permuted_qk(m.gguf() != nullptr, m.config()); }

void save_adapter(const std::string& dir, LoraAdapter& adapter, const model::Checkpoint& ck,
                  const AdapterWriteInfo& info) {
  save_adapter(dir, adapter, ck.config, has_permuted_qk(ck), info);
}

void save_adapter(const std::string& dir, LoraAdapter& adapter, const model::ModelConfig& config, bool permute,
                  const AdapterWriteInfo& info) {
  std::filesystem::create_directories(dir);
  const char* prefix = info.language_model ? kLanguageModelLayers : kLayers;
  formats::SafetensorsWriter writer;
  std::map<int, bool> layers;
  std::vector<std::string> targets, parameters;  // peft's target_modules and target_parameters
  for (auto& e : adapter.entries()) {
    layers[e.layer] = true;
    const std::string name(module_name(e.module));
    std::vector<std::string>& list = is_expert_module(e.module) ? parameters : targets;
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
    const ExpertNesting nesting{.both = adapter.factors(e.layer, Module::ExpertGateUp) &&
                                        adapter.factors(e.layer, Module::ExpertDown)};
    writer.add(tensor_name(config, e.layer, e.module, "lora_A", prefix, nesting), e.factors->a);
    writer.add(tensor_name(config, e.layer, e.module, "lora_B", prefix, nesting),
               permute && permuted_module(e.module) ? reorder_rows(e.factors->b, config.head_dim, true) : e.factors->b);
  }
  writer.set_metadata({{"format", "pt"}, {"producer", "brioche"}});
  writer.write(dir + "/adapter_model.safetensors");

  const auto& c = adapter.config();
  nlohmann::ordered_json cfg;
  cfg["peft_type"] = "LORA";
  cfg["task_type"] = "CAUSAL_LM";
  const std::string& base = info.base_model_id.empty() ? info.base_model_path : info.base_model_id;
  cfg["base_model_name_or_path"] = base.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(base);
  if (!info.base_model_path.empty()) cfg["brioche_base_model_path"] = info.base_model_path;
  cfg["r"] = c.rank;
  cfg["lora_alpha"] = c.alpha;
  cfg["lora_dropout"] = c.dropout;
  cfg["use_rslora"] = c.rs_lora;
  const bool all_layers = int(layers.size()) == config.n_layers;
  if (info.language_model) {
    // A regex (peft matches it against the whole module name): the text model's projections only, not the
    // vision or audio towers' modules of the same names. peft takes no layers_to_transform beside a regex,
    // so the adapted layers are in it.
    std::string modules, indices = R"(\d+)";
    for (const std::string& t : targets) modules += (modules.empty() ? "" : "|") + t;
    if (!all_layers) {
      indices.clear();
      for (auto [l, _] : layers) indices += (indices.empty() ? "" : "|") + std::to_string(l);
    }
    cfg["target_modules"] = targets.empty()
                                ? nlohmann::ordered_json(nullptr)
                                : nlohmann::ordered_json(R"(.*language_model\.layers\.()" + indices +
                                                         R"()\.(self_attn|mlp|linear_attn)\.()" + modules + ")");
  } else {
    cfg["target_modules"] = targets.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(targets);
  }
  // The experts' 3-D parameters (peft's ParamWrapper); peft matches them by suffix in every layer it adapts.
  if (!parameters.empty()) cfg["target_parameters"] = parameters;
  cfg["bias"] = "none";
  cfg["fan_in_fan_out"] = false;
  cfg["inference_mode"] = true;
  cfg["init_lora_weights"] = true;
  cfg["modules_to_save"] = nullptr;
  if (all_layers || info.language_model) {
    cfg["layers_to_transform"] = nullptr;
  } else {
    std::vector<int> list;
    for (auto [l, _] : layers) list.push_back(l);
    cfg["layers_to_transform"] = list;
  }
  cfg["rank_pattern"] = nlohmann::ordered_json::object();
  cfg["alpha_pattern"] = nlohmann::ordered_json::object();
  std::ofstream out(dir + "/adapter_config.json");
  BRIOCHE_CHECK(out.good(), "cannot write ", dir, "/adapter_config.json");
  out << cfg.dump(2) << "\n";
}

namespace {

struct ExpertTargets {
  bool gate_up = false, down = false;
};

// peft's target_parameters: the experts' 3-D parameters ("experts.gate_up_proj", "experts.down_proj", or any
// name ending so); anything else is refused.
ExpertTargets read_expert_targets(const nlohmann::json& cfg, const std::string& config_path) {
  ExpertTargets t;
  if (!cfg.contains("target_parameters") || cfg["target_parameters"].is_null()) return t;
  const nlohmann::json& list = cfg["target_parameters"];
  BRIOCHE_CHECK(list.is_array(), config_path, ": expected a list for \"target_parameters\", found ", list.dump());
  for (const nlohmann::json& p : list) {
    const std::string name = p.is_string() ? p.get<std::string>() : p.dump();
    if (name == "gate_up_proj" || name.ends_with(".gate_up_proj")) {
      t.gate_up = true;
    } else if (name == "down_proj" || name.ends_with("experts.down_proj")) {
      t.down = true;
    } else {
      BRIOCHE_CHECK(false, config_path, ": target_parameters entry '", name,
                    "' is not supported (brioche adapts the MoE experts' experts.gate_up_proj and experts.down_proj)");
    }
  }
  return t;
}

}  // namespace

std::unique_ptr<LoraAdapter> load_adapter(const std::string& dir, const model::Checkpoint& ck) {
  return load_adapter(dir, ck.config, has_permuted_qk(ck));
}

std::unique_ptr<LoraAdapter> load_adapter(const std::string& dir, const model::ModelConfig& config, bool permute,
                                          int max_rank, const LoraShapes& shapes) {
  if (is_gguf_adapter_file(dir)) return load_gguf_adapter(dir, config, permute, max_rank, shapes);
  const std::string config_path = dir + "/adapter_config.json";
  // A bounded read of a regular file (a FIFO must not hang the load) and a
  // bounded parse (nesting deeper than kMaxJsonDepth is refused before
  // anything walks it: core/json_limits.h).
  auto text = formats::read_regular_file_if_present(config_path, formats::kMaxConfigJsonBytes);
  BRIOCHE_CHECK(text.has_value(), "adapter: cannot open ", config_path, " (expected a PEFT LoRA adapter directory)");
  nlohmann::json cfg = parse_json_bounded(*text, config_path);
  BRIOCHE_CHECK(cfg.value("peft_type", std::string("LORA")) == "LORA", config_path, ": peft_type '",
                cfg.value("peft_type", std::string()), "' is not LORA");
  BRIOCHE_CHECK(!cfg.value("use_dora", false), config_path, ": DoRA adapters are not supported");
  BRIOCHE_CHECK(cfg.contains("r") && cfg["r"].is_number_integer(), config_path, ": expected an integer \"r\", found ",
                cfg.contains("r") ? cfg["r"].dump() : std::string("none"));
  const int64_t r = cfg["r"].get<int64_t>();
  BRIOCHE_CHECK(r >= 1 && r <= max_rank, config_path, ": rank r = ", r, " outside [1, ", max_rank, "]");
  LoraConfig lora;
  lora.rank = int(r);
  const nlohmann::json alpha = cfg.value("lora_alpha", nlohmann::json(lora.rank));
  BRIOCHE_CHECK(alpha.is_number() && std::isfinite(alpha.get<double>()), config_path,
                ": expected a finite number for \"lora_alpha\", found ", alpha.dump());
  lora.alpha = alpha.get<float>();
  const nlohmann::json rs = cfg.value("use_rslora", nlohmann::json(false));
  BRIOCHE_CHECK(rs.is_boolean(), config_path, ": expected true or false for \"use_rslora\", found ", rs.dump());
  lora.rs_lora = rs.get<bool>();
  lora.dropout = 0.0f;
  BRIOCHE_CHECK(cfg.value("rank_pattern", nlohmann::json::object()).empty() &&
                    cfg.value("alpha_pattern", nlohmann::json::object()).empty(),
                config_path, ": per-module rank_pattern/alpha_pattern are not supported");

  const std::string st_path = dir + "/adapter_model.safetensors";
  auto file = formats::SafetensorsFile::open(st_path);
  // peft names the layers by the model it wrapped: model.layers, or model.language_model.layers (Gemma 4's
  // multimodal class); the adapter's own names decide.
  const char* prefix = kLayers;
  for (const auto& t : file->tensors())
    if (t.name.starts_with(kLanguageModelLayers)) prefix = kLanguageModelLayers;
  // Which expert parameters peft wrapped decides which of them experts.lora_A names (ExpertNesting).
  const ExpertTargets expert_targets = read_expert_targets(cfg, config_path);
  const ExpertNesting nesting{.both = expert_targets.gate_up && expert_targets.down};
  std::vector<LoraAdapter::Site> sites;
  std::set<std::string> known;  // every tensor name a site reads
  for (int l = 0; l < config.n_layers; ++l) {
    for (int m = 0; m < kNumModules; ++m) {
      if (Module(m) == Module::ExpertGateUp && !expert_targets.gate_up) continue;
      if (Module(m) == Module::ExpertDown && !expert_targets.down) continue;
      const std::string a_name = tensor_name(config, l, Module(m), "lora_A", prefix, nesting);
      const std::string b_name = tensor_name(config, l, Module(m), "lora_B", prefix, nesting);
      const bool has_a = file->has(a_name), has_b = file->has(b_name);
      BRIOCHE_CHECK(has_a == has_b, st_path, ": ", has_a ? b_name : a_name, " is missing");
      if (has_a) sites.push_back({l, Module(m)}), known.insert(a_name), known.insert(b_name);
    }
  }
  for (const auto& t : file->tensors())
    BRIOCHE_CHECK(known.count(t.name) != 0 || t.name.find(".lora_") == std::string::npos, st_path, ": tensor '", t.name,
                  "' is no LoRA factor of a projection brioche adapts on this ", config.architecture,
                  " model (expected <layers>.N.<module path>.lora_A/lora_B.weight; the experts' as "
                  "target_parameters lists them)");
  BRIOCHE_CHECK(!sites.empty(), st_path,
                ": no LoRA tensors named base_model.model.model.layers.N.<self_attn|mlp|linear_attn>.",
                "<module>.lora_A.weight");
  lora.targets.clear();
  for (const auto& s : sites) {
    if (std::find(lora.targets.begin(), lora.targets.end(), s.module) == lora.targets.end())
      lora.targets.push_back(s.module);
  }
  for (const auto& s : sites)
    BRIOCHE_CHECK(!shapes || shapes(s.layer, s.module).in > 0, st_path, ": ",
                  tensor_name(config, s.layer, s.module, "lora_A", prefix, nesting), " adapts a projection that layer ",
                  s.layer, " of this model does not have");
  auto adapter = std::make_unique<LoraAdapter>(config, lora, sites, shapes);
  for (auto& e : adapter->entries()) {
    for (const char* ab : {"lora_A", "lora_B"}) {
      const std::string name = tensor_name(config, e.layer, e.module, ab, prefix, nesting);
      Tensor t = file->tensor(name);
      Tensor& dst = ab[5] == 'A' ? e.factors->a : e.factors->b;
      BRIOCHE_CHECK(t.rank() == 2 && t.dim(0) == dst.dim(0) && t.dim(1) == dst.dim(1), st_path, ": tensor '", name,
                    "' expected shape [", dst.dim(0), ", ", dst.dim(1), "], found ", t.describe());
      Tensor f = factor_f32(t, st_path, name);
      if (ab[5] == 'B' && permute && permuted_module(e.module)) f = reorder_rows(f, config.head_dim, false);
      std::memcpy(dst.data(), f.data(), f.nbytes());
    }
  }
  return adapter;
}

namespace {

// A [r, in] and B [out, r] as the served f16 factors A and s·Bᵀ [r, out].
model::AdapterProjection served_factors(const Tensor& a, const Tensor& b, float s) {
  const int64_t r = a.dim(0), in = a.dim(1), out = b.dim(0);
  const Tensor a32 = copy_f32(a), b32 = copy_f32(b);
  Tensor a16 = Tensor::zeros(DType::F16, {r, in});
  Tensor bt = Tensor::zeros(DType::F16, {r, out});  // s·Bᵀ
  for (int64_t k = 0; k < r; ++k)
    for (int64_t i = 0; i < in; ++i) a16.row_as<uint16_t>(k)[i] = f32_to_f16(a32.row_as<float>(k)[i]);
  for (int64_t o = 0; o < out; ++o) {
    const float* row = b32.row_as<float>(o);
    for (int64_t k = 0; k < r; ++k) bt.row_as<uint16_t>(k)[o] = f32_to_f16(s * row[k]);
  }
  return {.a = a16, .bt = bt};
}

// Expert e's A_e [r, in] and rows [first_out, first_out + n_out) of B_e [out, r] from an expert parameter's f32
// factors (lora.h's layout: A [E·r, in], B_e[o, j] = B[o, j·E + e]).
std::pair<Tensor, Tensor> expert_factors(const LoraFactors& f, int64_t e, int64_t n_experts, int64_t first_out,
                                         int64_t n_out) {
  BRIOCHE_CHECK(f.a.dtype() == DType::F32 && f.b.dtype() == DType::F32 && f.a.dim(0) % n_experts == 0 &&
                    f.b.dim(1) == f.a.dim(0) && first_out + n_out <= f.b.dim(0),
                "serving_adapter: expert factors A ", f.a.describe(), " and B ", f.b.describe(), " for ", n_experts,
                " experts (expected f32 A [E·r, in], B [out, r·E])");
  const int64_t r = f.a.dim(0) / n_experts, in = f.a.dim(1);
  Tensor a = Tensor::zeros(DType::F32, {r, in}), b = Tensor::zeros(DType::F32, {n_out, r});
  for (int64_t j = 0; j < r; ++j) std::memcpy(a.row_as<float>(j), f.a.row_as<float>(e * r + j), size_t(in) * 4);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t j = 0; j < r; ++j) b.row_as<float>(o)[j] = f.b.row_as<float>(first_out + o)[j * n_experts + e];
  return {a, b};
}

}  // namespace

std::shared_ptr<model::ServedAdapter> serving_adapter(const LoraAdapter& adapter, Device device) {
  // Module and Projection name the same projections in the same order up to LinearOut; the experts' two
  // parameters go to ServedAdapter::experts, shared_expert_gate to Projection::SharedExpertGate.
  static_assert(int(Module::Down) == int(model::Projection::Down) &&
                int(Module::LinearOut) == int(model::Projection::LinearOut) &&
                kServedModules + 1 == model::kProjections && kLlamaModules == model::kBlockProjections &&
                kNumModules == kServedModules + 3);
  auto served = std::make_shared<model::ServedAdapter>();
  served->rank = adapter.config().rank;
  served->layers.resize(size_t(adapter.n_layers()));
  served->experts.resize(size_t(adapter.n_layers()));
  const float s = adapter.scale();
  const auto on_device = [device](model::AdapterProjection p) {
    return model::AdapterProjection{.a = ops::to_device(p.a, device), .bt = ops::to_device(p.bt, device)};
  };
  for (int l = 0; l < adapter.n_layers(); ++l) {
    for (int m = 0; m < kServedModules; ++m)
      if (const LoraFactors* f = adapter.factors(l, Module(m)))
        served->layers[size_t(l)][size_t(m)] = on_device(served_factors(f->a, f->b, s));
    if (const LoraFactors* f = adapter.factors(l, Module::SharedExpertGate))
      served->layers[size_t(l)][size_t(model::Projection::SharedExpertGate)] = on_device(served_factors(f->a, f->b, s));
    const LoraFactors* gate_up = adapter.factors(l, Module::ExpertGateUp);
    const LoraFactors* down = adapter.factors(l, Module::ExpertDown);
    if (!gate_up && !down) continue;
    const int64_t n_experts =
        std::max(adapter.shapes()(l, Module::ExpertGateUp).experts, adapter.shapes()(l, Module::ExpertDown).experts);
    std::vector<model::AdapterExpert>& experts = served->experts[size_t(l)];
    experts.resize(size_t(n_experts));
    for (int64_t e = 0; e < n_experts; ++e) {
      model::AdapterExpert& x = experts[size_t(e)];
      if (gate_up) {
        // peft's gate_up_proj delta [2I, in]: the gate's I rows, then the up's.
        const int64_t inter = gate_up->b.dim(0) / 2;
        const auto [a, b_gate] = expert_factors(*gate_up, e, n_experts, 0, inter);
        const Tensor b_up = expert_factors(*gate_up, e, n_experts, inter, inter).second;
        x.gate = on_device(served_factors(a, b_gate, s));
        x.up = {.a = x.gate.a, .bt = ops::to_device(served_factors(a, b_up, s).bt, device)};
      }
      if (down) {
        auto [a, b] = expert_factors(*down, e, n_experts, 0, down->b.dim(0));
        x.down = on_device(served_factors(a, b, s));
      }
    }
  }
  return served;
}

namespace {

// W + s·B·A of every adapted projection of layer l: targets[m] is the weight of Module(m).
int merge_layer(const LoraAdapter& adapter, int l, const std::array<Tensor*, kNumModules>& targets) {
  int merged = 0;
  for (int m = 0; m < kNumModules; ++m) {
    const LoraFactors* f = adapter.factors(l, Module(m));
    if (!f || is_expert_module(Module(m))) continue;  // (merge_experts)
    BRIOCHE_CHECK(targets[size_t(m)] && targets[size_t(m)]->defined(), "merge: layer ", l, " has no ",
                  module_name(Module(m)), " for the adapter's factors");
    Tensor merged_w = copy_f32(*targets[size_t(m)]);  // [out, in]
    BRIOCHE_CHECK(merged_w.dim(0) == f->b.dim(0) && merged_w.dim(1) == f->a.dim(1), "merge: layer ", l, " ",
                  module_name(Module(m)), " is [", merged_w.dim(0), ", ", merged_w.dim(1), "], the adapter's B·A [",
                  f->b.dim(0), ", ", f->a.dim(1), "]");
    const int64_t out = merged_w.dim(0), in = merged_w.dim(1), r = f->a.dim(0);
    const float s = adapter.scale();
    for (int64_t o = 0; o < out; ++o) {
      float* row = merged_w.row_as<float>(o);
      const float* b = f->b.row_as<float>(o);
      for (int64_t k = 0; k < r; ++k) {
        const float coef = s * b[k];
        const float* a = f->a.row_as<float>(k);
        for (int64_t i = 0; i < in; ++i) row[i] += coef * a[i];
      }
    }
    *targets[size_t(m)] = merged_w;
    ++merged;
  }
  return merged;
}

// B_e·A_e of expert e of an expert parameter's factors (lora.h's layout), as f32 [out, in], times s.
Tensor expert_delta(const LoraFactors& f, int64_t e, int64_t n_experts, float s) {
  const int64_t r = f.a.dim(0) / n_experts, in = f.a.dim(1), out = f.b.dim(0);
  Tensor delta = Tensor::zeros(DType::F32, {out, in});
  for (int64_t o = 0; o < out; ++o) {
    float* row = delta.row_as<float>(o);
    const float* b = f.b.row_as<float>(o);
    for (int64_t j = 0; j < r; ++j) {
      const float coef = s * b[j * n_experts + e];
      const float* a = f.a.row_as<float>(e * r + j);
      for (int64_t i = 0; i < in; ++i) row[i] += coef * a[i];
    }
  }
  return delta;
}

// w [E, out, in] (any dtype) becomes f32 W_e + s·B_e·A_e for every expert.
void merge_expert_stack(const LoraAdapter& adapter, int l, Module m, Tensor& w) {
  const LoraFactors& f = *adapter.factors(l, m);
  const int64_t E = w.dim(0), out = w.dim(1), in = w.dim(2);
  BRIOCHE_CHECK(f.a.dim(0) % E == 0 && f.b.dim(0) == out && f.a.dim(1) == in, "merge: layer ", l, " ", module_name(m),
                " is ", w.describe(), ", the adapter's factors A ", f.a.describe(), " and B ", f.b.describe());
  Tensor merged = Tensor::zeros(DType::F32, {E, out, in});
  for (int64_t e = 0; e < E; ++e) {
    Tensor dst = merged.select(e);
    Tensor we = copy_f32(w.select(e));
    ops::add_scaled(expert_delta(f, e, E, adapter.scale()), 1.0f, we);
    std::memcpy(dst.data(), we.data(), we.nbytes());
  }
  w = merged;
}

// rows [from, from + w.rows) of delta added to w (f32 W + the rows).
void add_rows(const Tensor& delta, int64_t from, Tensor& w) {
  Tensor merged = copy_f32(w);
  for (int64_t o = 0; o < merged.dim(0); ++o) {
    float* row = merged.row_as<float>(o);
    const float* d = delta.row_as<float>(from + o);
    for (int64_t i = 0; i < merged.dim(1); ++i) row[i] += d[i];
  }
  w = merged;
}

}  // namespace

int merge_adapter(model::Checkpoint& ck, const LoraAdapter& adapter) {
  int merged = 0;
  for (int l = 0; l < ck.config.n_layers; ++l) {
    auto& w = ck.weights.layers[size_t(l)];
    merged += merge_layer(adapter, l, {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down});
  }
  return merged;
}

int merge_adapter(model::Gemma4Checkpoint& ck, const LoraAdapter& adapter) {
  BRIOCHE_CHECK(adapter.n_layers() == ck.config.base.n_layers, "merge: the adapter has ", adapter.n_layers(),
                " layers, the model ", ck.config.base.n_layers);
  int merged = 0;
  for (int l = 0; l < ck.config.base.n_layers; ++l) {
    auto& w = ck.weights.layers[size_t(l)];
    merged += merge_layer(adapter, l, {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down});
    if (adapter.factors(l, Module::ExpertGateUp))
      merge_expert_stack(adapter, l, Module::ExpertGateUp, w.experts_gate_up), ++merged;
    if (adapter.factors(l, Module::ExpertDown))
      merge_expert_stack(adapter, l, Module::ExpertDown, w.experts_down), ++merged;
  }
  return merged;
}

int merge_adapter(model::Qwen35Checkpoint& ck, const LoraAdapter& adapter) {
  BRIOCHE_CHECK(adapter.n_layers() == ck.config.n_layers, "merge: the adapter has ", adapter.n_layers(),
                " layers, the model ", ck.config.n_layers);
  int merged = 0;
  for (int l = 0; l < ck.config.n_layers; ++l) {
    model::Qwen35Layer& w = ck.layers[size_t(l)];
    model::Qwen35LinearAttention& la = w.linear;
    model::Qwen35FullAttention& fa = w.full;
    // In Module order: q/k/v/o, gate/up/down (the shared expert's in the MoE model), then the
    // linear-attention projections and the shared expert's gate.
    model::Qwen35Mlp& mlp = ck.qwen.n_experts > 0 ? w.shared_expert : w.mlp;
    merged += merge_layer(adapter, l,
                          {&fa.wq, &fa.wk, &fa.wv, &fa.wo, &mlp.gate, &mlp.up, &mlp.down, &la.in_qkv, &la.in_z,
                           &la.in_b, &la.in_a, &la.out, nullptr, nullptr, &w.shared_expert_gate});
    // The experts: peft's gate_up_proj delta [2I, hidden] is the gate rows, then the up rows.
    const int64_t E = int64_t(w.experts.size());
    if (const LoraFactors* f = adapter.factors(l, Module::ExpertGateUp)) {
      for (int64_t e = 0; e < E; ++e) {
        const Tensor delta = expert_delta(*f, e, E, adapter.scale());
        BRIOCHE_CHECK(
            delta.dim(0) == 2 * w.experts[size_t(e)].gate.dim(0) && delta.dim(1) == w.experts[size_t(e)].gate.dim(1),
            "merge: layer ", l, " experts.gate_up_proj's B·A is [", delta.dim(0), ", ", delta.dim(1),
            "], the expert's gate ", w.experts[size_t(e)].gate.describe());
        add_rows(delta, 0, w.experts[size_t(e)].gate);
        add_rows(delta, w.experts[size_t(e)].gate.dim(0), w.experts[size_t(e)].up);
      }
      ++merged;
    }
    if (const LoraFactors* f = adapter.factors(l, Module::ExpertDown)) {
      for (int64_t e = 0; e < E; ++e) add_rows(expert_delta(*f, e, E, adapter.scale()), 0, w.experts[size_t(e)].down);
      ++merged;
    }
  }
  return merged;
}

}  // namespace brioche::train
