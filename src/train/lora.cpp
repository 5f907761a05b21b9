#include "train/lora.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"

namespace brioche::train {

namespace {

constexpr std::array<std::string_view, kNumModules> kNames = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                              "gate_proj", "up_proj", "down_proj"};

// SplitMix64 finaliser: a well-mixed 64-bit hash.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::string_view module_name(Module m) { return kNames[size_t(m)]; }

std::string_view module_parent(Module m) {
  return m == Module::Gate || m == Module::Up || m == Module::Down ? "mlp" : "self_attn";
}

std::optional<Module> parse_module(std::string_view name) {
  for (int i = 0; i < kNumModules; ++i) {
    std::string_view full = kNames[size_t(i)];
    if (name == full || name == full.substr(0, full.size() - 5)) return Module(i);
  }
  return std::nullopt;
}

float LoraConfig::scale() const {
  return rs_lora ? alpha / std::sqrt(float(rank)) : alpha / float(rank);
}

ModuleShape module_shape(const model::ModelConfig& c, Module m) {
  switch (m) {
    case Module::Q: return {c.hidden_size, c.q_dim()};
    case Module::K:
    case Module::V: return {c.hidden_size, c.kv_dim()};
    case Module::O: return {c.q_dim(), c.hidden_size};
    case Module::Gate:
    case Module::Up: return {c.hidden_size, c.intermediate_size};
    case Module::Down: return {c.intermediate_size, c.hidden_size};
  }
  return {};
}

LoraAdapter::LoraAdapter(const model::ModelConfig& c, const LoraConfig& lora, uint64_t seed)
    : config_(lora), scale_(lora.scale()) {
  BRIOCHE_CHECK(lora.rank > 0, "lora: rank must be positive, got ", lora.rank);
  BRIOCHE_CHECK(lora.dropout >= 0.0f && lora.dropout < 1.0f, "lora: dropout must be in [0, 1), got ", lora.dropout);
  BRIOCHE_CHECK(!lora.targets.empty(), "lora: no target modules");
  const int n = c.n_layers;
  const int adapted = lora.num_layers < 0 ? n : std::min(n, lora.num_layers);
  BRIOCHE_CHECK(adapted > 0, "lora: num_layers must be positive or -1 (all), got ", lora.num_layers);
  first_layer_ = n - adapted;
  layers_.resize(size_t(n));
  std::mt19937_64 rng(seed);
  for (int l = first_layer_; l < n; ++l) {
    for (Module m : lora.targets) {
      auto f = std::make_unique<LoraFactors>();
      auto shape = module_shape(c, m);
      f->a = Tensor::zeros(DType::F32, {lora.rank, shape.in});
      f->b = Tensor::zeros(DType::F32, {shape.out, lora.rank});
      f->grad_a = Tensor::zeros(DType::F32, {lora.rank, shape.in});
      f->grad_b = Tensor::zeros(DType::F32, {shape.out, lora.rank});
      // kaiming_uniform_(a=√5): bound = √(6 / ((1 + 5)·fan_in)) = 1/√in
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      const float bound = 1.0f / std::sqrt(float(shape.in));
      float* a = f->a.data_as<float>();
      for (int64_t i = 0; i < f->a.numel(); ++i) a[i] = bound * uniform(rng);
      layers_[size_t(l)][size_t(m)] = std::move(f);
    }
  }
}

LoraAdapter::LoraAdapter(const model::ModelConfig& c, const LoraConfig& lora, const std::vector<Site>& sites)
    : config_(lora), scale_(lora.scale()) {
  BRIOCHE_CHECK(lora.rank > 0, "lora: rank must be positive, got ", lora.rank);
  layers_.resize(size_t(c.n_layers));
  first_layer_ = c.n_layers;
  for (const auto& s : sites) {
    BRIOCHE_CHECK(s.layer >= 0 && s.layer < c.n_layers, "lora: layer ", s.layer, " outside the model's ",
                  c.n_layers, " layers");
    auto f = std::make_unique<LoraFactors>();
    auto shape = module_shape(c, s.module);
    f->a = Tensor::zeros(DType::F32, {lora.rank, shape.in});
    f->b = Tensor::zeros(DType::F32, {shape.out, lora.rank});
    f->grad_a = Tensor::zeros(DType::F32, {lora.rank, shape.in});
    f->grad_b = Tensor::zeros(DType::F32, {shape.out, lora.rank});
    layers_[size_t(s.layer)][size_t(s.module)] = std::move(f);
    first_layer_ = std::min(first_layer_, s.layer);
  }
}

void LoraAdapter::set_dropout(float p) {
  BRIOCHE_CHECK(p >= 0.0f && p < 1.0f, "lora: dropout must be in [0, 1), got ", p);
  config_.dropout = p;
}

void LoraAdapter::zero_grads() {
  for (auto& e : entries()) {
    std::fill_n(e.factors->grad_a.data_as<float>(), e.factors->grad_a.numel(), 0.0f);
    std::fill_n(e.factors->grad_b.data_as<float>(), e.factors->grad_b.numel(), 0.0f);
  }
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

float DropoutStream::factor(int64_t row, int64_t col) const {
  const uint64_t h = mix64(key ^ mix64(uint64_t(row) * 0x100000001B3ull + uint64_t(col)));
  const float u = float(h >> 40) * (1.0f / float(1 << 24));  // uniform [0, 1)
  return u < p ? 0.0f : 1.0f / (1.0f - p);
}

DropoutStream DropoutStream::make(float p, uint64_t step_seed, int layer, Module m) {
  return {p, mix64(step_seed ^ mix64(uint64_t(layer) * 16 + uint64_t(m) + 1))};
}

void apply_dropout(const DropoutStream& d, const Tensor& src, Tensor& dst) {
  const int64_t n = src.dim(0), k = src.dim(1);
  ThreadPool::global().parallel_for(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* s = src.row_as<float>(r);
      float* o = dst.row_as<float>(r);
      for (int64_t c = 0; c < k; ++c) o[c] = s[c] * d.factor(r, c);
    }
  });
}

}  // namespace brioche::train
