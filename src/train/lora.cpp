#include "train/lora.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/dropout_hash.h"
#include "ops/device.h"
#include "ops/dropout.h"

namespace brioche::train {

namespace {

constexpr std::array<std::string_view, kNumModules> kNames = {"q_proj",
                                                              "k_proj",
                                                              "v_proj",
                                                              "o_proj",
                                                              "gate_proj",
                                                              "up_proj",
                                                              "down_proj",
                                                              "in_proj_qkv",
                                                              "in_proj_z",
                                                              "in_proj_b",
                                                              "in_proj_a",
                                                              "out_proj",
                                                              "experts.gate_up_proj",
                                                              "experts.down_proj",
                                                              "shared_expert_gate"};

}  // namespace

std::string_view module_name(Module m) { return kNames[size_t(m)]; }

std::string_view module_parent(Module m) {
  if (m == Module::Gate || m == Module::Up || m == Module::Down || int(m) >= kServedModules) return "mlp";
  return int(m) >= kLlamaModules ? "linear_attn" : "self_attn";
}

std::optional<Module> parse_module(std::string_view name) {
  if (name == "gate_up_proj") return Module::ExpertGateUp;  // the only gate_up_proj of the supported models
  for (int i = 0; i < kNumModules; ++i) {
    std::string_view full = kNames[size_t(i)];
    if (name == full || (full.ends_with("_proj") && name == full.substr(0, full.size() - 5))) return Module(i);
  }
  return std::nullopt;
}

float LoraConfig::scale() const { return rs_lora ? alpha / std::sqrt(float(rank)) : alpha / float(rank); }

ModuleShape module_shape(const model::ModelConfig& c, Module m) {
  switch (m) {
    case Module::Q: return {c.hidden_size, c.q_dim()};
    case Module::K:
    case Module::V: return {c.hidden_size, c.kv_dim()};
    case Module::O: return {c.q_dim(), c.hidden_size};
    case Module::Gate:
    case Module::Up: return {c.hidden_size, c.intermediate_size};
    case Module::Down: return {c.intermediate_size, c.hidden_size};
    default: break;  // the Llama family has no linear-attention projections
  }
  return {};
}

LoraShapes uniform_shapes(const model::ModelConfig& config) {
  return [config](int, Module m) { return module_shape(config, m); };
}

LoraAdapter::LoraAdapter(const model::ModelConfig& c, const LoraConfig& lora, uint64_t seed, LoraShapes shapes)
    : config_(lora), scale_(lora.scale()), shapes_(shapes ? std::move(shapes) : uniform_shapes(c)) {
  BRIOCHE_CHECK(lora.rank > 0, "lora: rank must be positive, got ", lora.rank);
  BRIOCHE_CHECK(lora.dropout >= 0.0f && lora.dropout < 1.0f, "lora: dropout must be in [0, 1), got ", lora.dropout);
  BRIOCHE_CHECK(!lora.targets.empty(), "lora: no target modules");
  const int n = c.n_layers;
  const int adapted = lora.num_layers < 0 ? n : std::min(n, lora.num_layers);
  BRIOCHE_CHECK(adapted > 0, "lora: num_layers must be positive or -1 (all), got ", lora.num_layers);
  std::vector<Site> sites;
  for (int l = n - adapted; l < n; ++l)
    for (Module m : lora.targets)
      if (shapes_(l, m).in > 0) sites.push_back({l, m});
  BRIOCHE_CHECK(!sites.empty(), "lora: none of the target modules exists in the adapted layers");
  check_expert_dropout(sites, lora.dropout);
  allocate(c, sites);
  first_layer_ = n - adapted;
  // A drawn in (layer, target order) so a seed gives the same factors as before the flat storage.
  std::mt19937_64 rng(seed);
  for (int l = first_layer_; l < n; ++l) {
    for (Module m : lora.targets) {
      if (!layers_[size_t(l)][size_t(m)]) continue;  // the layer has no such projection
      LoraFactors& f = *layers_[size_t(l)][size_t(m)];
      // kaiming_uniform_(a=√5): bound = √(6 / ((1 + 5)·fan_in)) = 1/√in
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      const float bound = 1.0f / std::sqrt(float(f.a.dim(1)));
      float* a = f.a.data_as<float>();
      for (int64_t i = 0; i < f.a.numel(); ++i) a[i] = bound * uniform(rng);
    }
  }
}

LoraAdapter::LoraAdapter(const model::ModelConfig& c, const LoraConfig& lora, const std::vector<Site>& sites,
                         LoraShapes shapes)
    : config_(lora), scale_(lora.scale()), shapes_(shapes ? std::move(shapes) : uniform_shapes(c)) {
  BRIOCHE_CHECK(lora.rank > 0, "lora: rank must be positive, got ", lora.rank);
  for (const auto& s : sites) {
    BRIOCHE_CHECK(s.layer >= 0 && s.layer < c.n_layers, "lora: layer ", s.layer, " outside the model's ", c.n_layers,
                  " layers");
    BRIOCHE_CHECK(shapes_(s.layer, s.module).in > 0, "lora: layer ", s.layer, " of this model has no ",
                  module_name(s.module), " to adapt");
  }
  allocate(c, sites);
}

void LoraAdapter::check_expert_dropout(const std::vector<Site>& sites, float p) const {
  if (p == 0.0f) return;
  for (const Site& s : sites)
    BRIOCHE_CHECK(!is_expert_module(s.module), "lora: dropout ", p, " with LoRA on ", module_name(s.module),
                  ": peft's ParamWrapper (the experts' 3-D parameters) refuses lora_dropout != 0; set lora_dropout 0 ",
                  "or leave the experts out of target_modules");
}

void LoraAdapter::allocate(const model::ModelConfig& c, const std::vector<Site>& sites) {
  model_config_ = c;
  layers_.clear();
  layers_.resize(size_t(c.n_layers));
  first_layer_ = c.n_layers;
  for (const auto& s : sites) {
    BRIOCHE_CHECK(!layers_[size_t(s.layer)][size_t(s.module)], "lora: site (layer ", s.layer, ", ",
                  module_name(s.module), ") given twice");
    layers_[size_t(s.layer)][size_t(s.module)] = std::make_unique<LoraFactors>();
    first_layer_ = std::min(first_layer_, s.layer);
  }
  int64_t n_a = 0, n_b = 0;
  for (auto& e : entries()) {
    const auto shape = shapes_(e.layer, e.module);
    n_a += config_.rank * shape.experts * shape.in;
    n_b += shape.out * config_.rank * shape.experts;
  }
  flat_ = {.a = Tensor::zeros(DType::F32, {std::max<int64_t>(n_a, 1)}),
           .b = Tensor::zeros(DType::F32, {std::max<int64_t>(n_b, 1)}),
           .grad_a = Tensor::zeros(DType::F32, {std::max<int64_t>(n_a, 1)}),
           .grad_b = Tensor::zeros(DType::F32, {std::max<int64_t>(n_b, 1)})};
  bind_views();
}

void LoraAdapter::bind_views() {
  int64_t off_a = 0, off_b = 0;
  for (auto& e : entries()) {
    const auto shape = shapes_(e.layer, e.module);
    const int64_t r = config_.rank * shape.experts;  // every expert's rank-r factors side by side
    LoraFactors& f = *e.factors;
    f.a = flat_.a.slice(0, off_a, off_a + r * shape.in).reshape({r, shape.in});
    f.grad_a = flat_.grad_a.slice(0, off_a, off_a + r * shape.in).reshape({r, shape.in});
    f.b = flat_.b.slice(0, off_b, off_b + shape.out * r).reshape({shape.out, r});
    f.grad_b = flat_.grad_b.slice(0, off_b, off_b + shape.out * r).reshape({shape.out, r});
    off_a += r * shape.in;
    off_b += shape.out * r;
  }
}

void LoraAdapter::to_device(Device device) {
  if (device == this->device()) return;
  for (Tensor* t : {&flat_.a, &flat_.b, &flat_.grad_a, &flat_.grad_b}) *t = ops::to_device(*t, device);
  bind_views();
}

std::unique_ptr<LoraAdapter> LoraAdapter::host_copy() const {
  std::vector<Site> sites;
  for (int l = 0; l < int(layers_.size()); ++l)
    for (int m = 0; m < kNumModules; ++m)
      if (layers_[size_t(l)][size_t(m)]) sites.push_back({l, Module(m)});
  auto copy = std::make_unique<LoraAdapter>(model_config_, config_, sites, shapes_);
  for (auto [from, to] : {std::pair{&flat_.a, &copy->flat_.a}, std::pair{&flat_.b, &copy->flat_.b}})
    ops::copy(*from, *to);
  return copy;
}

void LoraAdapter::set_dropout(float p) {
  BRIOCHE_CHECK(p >= 0.0f && p < 1.0f, "lora: dropout must be in [0, 1), got ", p);
  std::vector<Site> sites;
  for (const Entry& e : entries()) sites.push_back({e.layer, e.module});
  check_expert_dropout(sites, p);
  config_.dropout = p;
}

void LoraAdapter::zero_grads() {
  if (device() == Device::CPU) {
    for (Tensor* g : {&flat_.grad_a, &flat_.grad_b}) std::fill_n(g->data_as<float>(), g->numel(), 0.0f);
    return;
  }
  // A device buffer is replaced by a fresh zero-filled one (the caching allocator reuses the old block).
  for (Tensor* g : {&flat_.grad_a, &flat_.grad_b}) *g = ops::zeros(DType::F32, {g->numel()}, device());
  bind_views();
}

int64_t LoraAdapter::parameter_count() const {
  int64_t n = 0;
  for (const auto& layer : layers_) {
    for (const auto& f : layer) {
      if (f) n += f->a.numel() + f->b.numel();
    }
  }
  return n;
}

std::vector<LoraAdapter::Entry> LoraAdapter::entries() {
  std::vector<Entry> out;
  for (int l = 0; l < int(layers_.size()); ++l) {
    for (int m = 0; m < kNumModules; ++m) {
      if (auto* f = layers_[size_t(l)][size_t(m)].get()) out.push_back({l, Module(m), f});
    }
  }
  return out;
}

ops::DropoutMask lora_dropout_mask(float p, uint64_t step_seed, int layer, Module m) {
  return {.p = p, .key = dropout_key(step_seed, layer, int(m))};
}

}  // namespace brioche::train
