#include "model/served_adapter.h"

#include <algorithm>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "ops/device.h"
#include "ops/lora_rows.h"

namespace brioche::model {

std::string_view projection_name(Projection p) {
  static constexpr std::string_view kNames[kProjections] = {
      "q_proj",      "k_proj",    "v_proj",    "o_proj",    "gate_proj", "up_proj",           "down_proj",
      "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",  "shared_expert_gate"};
  return kNames[size_t(p)];
}

namespace {

// Each distinct factor tensor once (an expert's gate and up share A_e).
size_t factor_bytes(const AdapterProjection& p, const Tensor* shared_a = nullptr) {
  if (!p.a.defined()) return 0;
  const bool a_shared = shared_a != nullptr && shared_a->defined() && shared_a->data() == p.a.data();
  return (a_shared ? 0 : p.a.nbytes()) + p.bt.nbytes();
}

// The name peft gives an expert part's parameter.
std::string_view expert_parameter_name(Projection part) {
  return part == Projection::Down ? "experts.down_proj" : "experts.gate_up_proj";
}

const AdapterProjection& expert_part(const AdapterExpert& e, Projection part) {
  return part == Projection::Gate ? e.gate : part == Projection::Up ? e.up : e.down;
}

}  // namespace

size_t ServedAdapter::bytes() const {
  size_t n = 0;
  for (const auto& layer : layers)
    for (const AdapterProjection& p : layer) n += factor_bytes(p);
  for (const auto& layer : experts)
    for (const AdapterExpert& e : layer)
      n += factor_bytes(e.gate) + factor_bytes(e.up, &e.gate.a) + factor_bytes(e.down);
  return n;
}

bool any_adapts_experts(std::span<const AdapterRows> rows, int layer) {
  return std::any_of(rows.begin(), rows.end(),
                     [layer](const AdapterRows& r) { return r.adapter->adapts_experts(layer); });
}

namespace {

// The lora_rows_add segments of `part` for every expert's rows (ExpertRows) of the adapters that adapt it,
// ascending; x and y give the shapes the factors must map.
std::vector<ops::LoraRows> expert_segments(std::span<const AdapterRows> rows, const ExpertRows& experts,
                                           Projection part, const Tensor& x, const Tensor& y) {
  BRIOCHE_CHECK(part == Projection::Gate || part == Projection::Up || part == Projection::Down,
                "add_expert_adapter_rows: an expert's part is its gate, up or down, got ", projection_name(part));
  const int64_t n_experts = int64_t(experts.expert_first.size()) - 1;
  BRIOCHE_CHECK(n_experts >= 1 && experts.expert_first.back() == int64_t(experts.batch_rows.size()),
                "add_expert_adapter_rows: expert_first must hold n_experts + 1 offsets ending at the ",
                experts.batch_rows.size(), " rows");
  std::vector<ops::LoraRows> segments;
  for (const AdapterRows& r : rows) {
    if (!r.adapter->adapts_experts(experts.layer)) continue;
    const std::vector<AdapterExpert>& factors = r.adapter->experts[size_t(experts.layer)];
    BRIOCHE_CHECK(int64_t(factors.size()) == n_experts, "forward: served adapter '", r.adapter->name, "''s ",
                  expert_parameter_name(part), " of layer ", experts.layer, " has factors for ", factors.size(),
                  " experts, the model ", n_experts, " (an adapter for another model?)");
    for (int64_t e = 0; e < n_experts; ++e) {
      const AdapterProjection& ap = expert_part(factors[size_t(e)], part);
      if (!ap.a.defined()) continue;
      BRIOCHE_CHECK(ap.in_features() == x.dim(1) && ap.out_features() == y.dim(1), "forward: served adapter '",
                    r.adapter->name, "''s ", expert_parameter_name(part), " of layer ", experts.layer, " (expert ", e,
                    part == Projection::Down   ? ""
                    : part == Projection::Gate ? ", gate"
                                               : ", up",
                    ") maps ", ap.in_features(), " to ", ap.out_features(), " features, the model's ", x.dim(1), " to ",
                    y.dim(1), " (an adapter for another model?)");
      // The expert's rows from this adapter's run of batch rows: one range, as both ascend.
      const auto begin = experts.batch_rows.begin() + experts.expert_first[size_t(e)];
      const auto end = experts.batch_rows.begin() + experts.expert_first[size_t(e + 1)];
      const auto first = std::lower_bound(begin, end, r.first_row);
      const auto last = std::lower_bound(first, end, r.first_row + r.n_rows);
      if (first == last) continue;
      segments.push_back({.first_row = int32_t(first - experts.batch_rows.begin()),
                          .n_rows = int32_t(last - first),
                          .a = &ap.a,
                          .bt = &ap.bt});
    }
  }
  std::sort(segments.begin(), segments.end(),
            [](const ops::LoraRows& a, const ops::LoraRows& b) { return a.first_row < b.first_row; });
  return segments;
}

}  // namespace

void add_expert_adapter_rows(std::span<const AdapterRows> rows, const ExpertRows& experts, Projection part,
                             const Tensor& x, Tensor& y, Tensor& u_scratch) {
  const std::vector<ops::LoraRows> segments = expert_segments(rows, experts, part, x, y);
  if (!segments.empty()) ops::lora_rows_add(x, segments, y, u_scratch);
}

void add_expert_gate_up_adapter_rows(std::span<const AdapterRows> rows, const ExpertRows& experts, const Tensor& x,
                                     Tensor& gate, Tensor& up, Tensor& u_scratch) {
  const std::vector<ops::LoraRows> gate_segments = expert_segments(rows, experts, Projection::Gate, x, gate);
  const std::vector<ops::LoraRows> up_segments = expert_segments(rows, experts, Projection::Up, x, up);
  if (gate_segments.empty() && up_segments.empty()) return;
  const ops::LoraRowsPart parts[] = {{.segments = gate_segments, .y = &gate}, {.segments = up_segments, .y = &up}};
  ops::lora_rows_add_group(x, parts, u_scratch);
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

namespace {

// Every factor of `adapter` passed through f (undefined ones stay so); an
// expert's gate and up keep sharing one A_e.
template <typename F>
std::shared_ptr<ServedAdapter> map_factors(const ServedAdapter& adapter, F&& f) {
  auto copy = std::make_shared<ServedAdapter>();
  copy->name = adapter.name;
  copy->path = adapter.path;
  copy->id = adapter.id;
  copy->rank = adapter.rank;
  const auto map = [&f](const Tensor& t) { return t.defined() ? f(t) : Tensor(); };
  copy->layers.resize(adapter.layers.size());
  for (size_t l = 0; l < adapter.layers.size(); ++l)
    for (int p = 0; p < kProjections; ++p) {
      const AdapterProjection& from = adapter.layers[l][size_t(p)];
      if (from.a.defined()) copy->layers[l][size_t(p)] = {.a = f(from.a), .bt = f(from.bt)};
    }
  copy->experts.resize(adapter.experts.size());
  for (size_t l = 0; l < adapter.experts.size(); ++l)
    for (const AdapterExpert& from : adapter.experts[l]) {
      AdapterExpert& to = copy->experts[l].emplace_back();
      to.gate = {.a = map(from.gate.a), .bt = map(from.gate.bt)};
      const bool shared_a = from.up.a.defined() && from.gate.a.defined() && from.up.a.data() == from.gate.a.data();
      to.up = {.a = shared_a ? to.gate.a : map(from.up.a), .bt = map(from.up.bt)};
      to.down = {.a = map(from.down.a), .bt = map(from.down.bt)};
    }
  return copy;
}

}  // namespace

std::shared_ptr<ServedAdapter> copy_to_device(const ServedAdapter& adapter, Device device) {
  return map_factors(adapter, [device](const Tensor& t) { return ops::to_device(t, device); });
}

bool serves_q8_0_factors(const Model& model, bool weights_converted) {
  if (model.device() != Device::CPU || weights_converted || model.gguf() == nullptr) return false;
  // The first layer's Q projection stands for the model's projections.
  const formats::GgufTensorInfo* wq = model.gguf()->find_tensor("blk.0.attn_q.weight");
  return wq != nullptr && dtype_info(wq->dtype).quantized;
}

std::shared_ptr<ServedAdapter> with_q8_0_factors(const ServedAdapter& adapter) {
  const auto whole_blocks = [](const Tensor& f) { return f.dim(1) % dtype_info(DType::Q8_0).block_elems == 0; };
  auto copy = std::make_shared<ServedAdapter>(adapter);
  for (auto& layer : copy->layers) {
    for (AdapterProjection& p : layer) {
      if (!p.a.defined() || !whole_blocks(p.a) || !whole_blocks(p.bt)) continue;
      p = {.a = ops::lora_factor_q8_0(p.a), .bt = ops::lora_factor_q8_0(p.bt)};
    }
  }
  // In one buffer in the order a step reads them (ops::pack_in_order).
  std::vector<Tensor*> in_step_order;
  for (auto& layer : copy->layers)
    for (AdapterProjection& p : layer)
      if (p.a.defined()) in_step_order.insert(in_step_order.end(), {&p.a, &p.bt});
  ops::pack_in_order(in_step_order);
  // An expert's gate and up (one A_e, s·B_eᵀ of the same shape) change format together.
  for (auto& layer : copy->experts)
    for (AdapterExpert& e : layer) {
      if (e.gate.a.defined() && whole_blocks(e.gate.a) && whole_blocks(e.gate.bt)) {
        const Tensor a = ops::lora_factor_q8_0(e.gate.a);
        e.gate = {.a = a, .bt = ops::lora_factor_q8_0(e.gate.bt)};
        e.up = {.a = a, .bt = ops::lora_factor_q8_0(e.up.bt)};
      }
      if (e.down.a.defined() && whole_blocks(e.down.a) && whole_blocks(e.down.bt))
        e.down = {.a = ops::lora_factor_q8_0(e.down.a), .bt = ops::lora_factor_q8_0(e.down.bt)};
    }
  return copy;
}

}  // namespace brioche::model
