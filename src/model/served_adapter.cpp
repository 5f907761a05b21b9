#include "model/served_adapter.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "ops/device.h"
#include "ops/lora_rows.h"

namespace brioche::model {

std::string_view projection_name(Projection p) {
  static constexpr std::string_view kNames[kProjections] = {"q_proj",    "k_proj",    "v_proj",    "o_proj",
                                                            "gate_proj", "up_proj",   "down_proj", "in_proj_qkv",
                                                            "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  return kNames[size_t(p)];
}

void add_adapter_rows(std::span<const AdapterRows> rows, AdapterSite site, const Tensor& x, Tensor& y,
                      Tensor& u_scratch) {
  std::vector<ops::LoraRows> segments;
  for (const AdapterRows& r : rows)
    if (const AdapterProjection* ap = r.adapter->projection(site.layer, site.projection)) {
      BRIOCHE_CHECK(ap->in_features() == x.dim(1) && ap->out_features() == y.dim(1), "forward: served adapter '",
                    r.adapter->name, "''s ", projection_name(site.projection), " of layer ", site.layer, " maps ",
                    ap->in_features(), " to ", ap->out_features(), " features, the model's ", x.dim(1), " to ",
                    y.dim(1), " (an adapter for another model?)");
      segments.push_back({.first_row = r.first_row, .n_rows = r.n_rows, .a = &ap->a, .bt = &ap->bt});
    }
  if (!segments.empty()) ops::lora_rows_add(x, segments, y, u_scratch);
}

std::shared_ptr<ServedAdapter> copy_to_device(const ServedAdapter& adapter, Device device) {
  auto copy = std::make_shared<ServedAdapter>();
  copy->name = adapter.name;
  copy->path = adapter.path;
  copy->id = adapter.id;
  copy->rank = adapter.rank;
  copy->layers.resize(adapter.layers.size());
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int p = 0; p < kProjections; ++p) {
      const AdapterProjection& from = adapter.layers[l][size_t(p)];
      if (!from.a.defined()) continue;
      copy->layers[l][size_t(p)] = {.a = ops::to_device(from.a, device), .bt = ops::to_device(from.bt, device)};
    }
  }
  return copy;
}

bool serves_q8_0_factors(const Model& model, bool weights_converted) {
  if (model.device() != Device::CPU || weights_converted || model.gguf() == nullptr) return false;
  // The first layer's Q projection stands for the model's projections.
  const formats::GgufTensorInfo* wq = model.gguf()->find_tensor("blk.0.attn_q.weight");
  return wq != nullptr && dtype_info(wq->dtype).quantized;
}

std::shared_ptr<ServedAdapter> with_q8_0_factors(const ServedAdapter& adapter) {
  auto copy = std::make_shared<ServedAdapter>(adapter);
  const auto whole_blocks = [](const Tensor& f) { return f.dim(1) % dtype_info(DType::Q8_0).block_elems == 0; };
  for (auto& layer : copy->layers) {
    for (AdapterProjection& p : layer) {
      if (!p.a.defined() || !whole_blocks(p.a) || !whole_blocks(p.bt)) continue;
      p = {.a = ops::lora_factor_q8_0(p.a), .bt = ops::lora_factor_q8_0(p.bt)};
    }
  }
  return copy;
}

}  // namespace brioche::model
