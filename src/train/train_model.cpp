#include "train/train_model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "core/error.h"
#include "ops/device.h"
#include "ops/embedding.h"
#include "ops/quantize.h"
#include "ops/layer_backward.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"

namespace brioche::train {

namespace {

// A copy of an f32 [n, d] tensor on `device` (its own device unless told).
Tensor copy_of(const Tensor& t, std::optional<Device> device = std::nullopt) {
  if (device && *device != t.device()) return ops::to_device(t, *device);  // one transfer (contiguous result)
  Tensor out = ops::uninitialized(DType::F32, {t.dim(0), t.dim(1)}, device.value_or(t.device()));
  ops::copy(t, out);
  return out;
}

size_t bytes_of(const LayerCache& c) {
  size_t n = 0;
  for (const Tensor* t :
       {&c.x_in, &c.h1, &c.q_raw, &c.k_raw, &c.q, &c.k, &c.v, &c.attn, &c.lse, &c.x_mid, &c.h2, &c.gate, &c.up, &c.act})
    n += t->nbytes();
  for (const auto& u : c.lora_u) n += u.nbytes();
  return n;
}

}  // namespace

TrainModel::TrainModel(const model::Checkpoint& ck, LoraAdapter* adapter, TrainModelOptions options)
    : ck_(ck), adapter_(adapter), options_(options) {
  const auto& c = ck.config;
  BRIOCHE_CHECK(options.segment_size >= 0, "train: segment_size must be >= 0, got ", options.segment_size);
  BRIOCHE_CHECK(options.mlp_chunk_rows >= 0, "train: mlp_chunk_size must be >= 0, got ", options.mlp_chunk_rows);
  inv_freq_ = ops::rope_inv_freq(c.head_dim, c.rope.theta, c.rope.scaling, c.rope.freq_factors);
  device_ = ck.weights.output_norm.device();
  BRIOCHE_CHECK(!options.offload_boundaries || options.segment_size > 0,
                "train: offload_boundaries needs segment_size > 0 (the boundaries are what is offloaded)");
  BRIOCHE_CHECK(!options.offload_attention || options.offload_boundaries,
                "train: offload_attention needs offload_boundaries (the attention outputs travel with them)");
  BRIOCHE_CHECK(options.boundary_dtype == DType::F32 || options.boundary_dtype == DType::BF16,
                "train: boundary_dtype must be f32 or bf16, got ", dtype_name(options.boundary_dtype));
  BRIOCHE_CHECK(options.device_boundaries >= 0, "train: device_boundaries must be >= 0, got ",
                options.device_boundaries);
  BRIOCHE_CHECK(options.device_boundaries == 0 || options.offload_boundaries, "train: device_boundaries ",
                options.device_boundaries,
                " needs offload_boundaries (it keeps some of the offloaded boundaries on "
                "the device)");
  if (adapter) {
    BRIOCHE_CHECK(adapter->n_layers() == c.n_layers, "train: adapter has ", adapter->n_layers(), " layers, model ",
                  c.n_layers);
    BRIOCHE_CHECK(adapter->device() == device_, "train: the adapter is on ", device_name(adapter->device()),
                  ", the model on ", device_name(device_), " (LoraAdapter::to_device)");
  }
}

int TrainModel::first_trainable_layer() const {
  return adapter_ ? adapter_->first_adapted_layer() : ck_.config.n_layers;
}

LayerContext TrainModel::context(const TokenBatch& batch, const ops::DenseAttentionLayout& layout,
                                 const ForwardOptions& o) const {
  return {.config = ck_.config,
          .positions = batch.positions,
          .layout = layout,
          .inv_freq = inv_freq_,
          .dropout_seed = o.dropout_seed,
          .adapter_enabled = o.adapter_enabled,
          .lora_dropout = o.for_backward,  // like PEFT's eval mode: no dropout in evaluation forwards
          .mlp_chunk_rows = options_.mlp_chunk_rows};
}

LayerParams TrainModel::params(int layer) const {
  return {.weights = ck_.weights.layers[size_t(layer)], .adapter = adapter_, .layer = layer};
}

Tensor TrainModel::frozen_prefix(const TokenBatch& batch) const {
  const auto& c = ck_.config;
  Tensor x = ops::uninitialized(DType::F32, {batch.n_rows(), c.hidden_size}, device_);
  ops::embedding(ck_.weights.token_embd, batch.tokens, x);
  const auto layout = batch.layout();
  const LayerContext ctx = context(batch, layout, {.adapter_enabled = false, .for_backward = false});
  LayerCache scratch;
  for (int l = 0; l < first_trainable_layer(); ++l) layer_forward(ctx, params(l), x, scratch);
  return x;
}

Tensor TrainModel::forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& o) {
  const auto& c = ck_.config;
  BRIOCHE_CHECK(prefix_out.dim(0) == batch.n_rows() && prefix_out.dim(1) == c.hidden_size,
                "train forward: prefix output ", prefix_out.describe(), " does not match ", batch.n_rows(), " rows of ",
                c.hidden_size);
  Tensor x = copy_of(prefix_out);
  caches_.clear();
  boundaries_.clear();
  batch_ = o.for_backward ? &batch : nullptr;
  layout_ = batch.layout();
  forward_options_ = o;
  const LayerContext ctx = context(batch, layout_, o);
  const int first = first_trainable_layer(), n_layers = c.n_layers;
  const bool keep_all = o.for_backward && options_.segment_size == 0;
  if (keep_all) caches_.resize(size_t(n_layers - first));
  const bool offload = o.for_backward && !keep_all && options_.offload_boundaries && device_ != Device::CPU;
  attention_offloaded_ = offload && options_.offload_attention;
  // Segments from this one on keep their boundaries on the device when offloading.
  const int n_segments =
      keep_all || !o.for_backward ? 0 : (n_layers - first + options_.segment_size - 1) / options_.segment_size;
  const int first_on_device = n_segments - std::min(options_.device_boundaries, n_segments);
  LayerCache scratch;
  for (int l = first; l < n_layers; ++l) {
    const size_t i = size_t(l - first);
    if (offload) host_.next_layer();
    if (o.for_backward && !keep_all && i % size_t(options_.segment_size) == 0) {
      // x changes in place: a copy is kept (in boundary_dtype).
      Tensor kept = options_.boundary_dtype == DType::F32 ? copy_of(x) : ops::convert(x, options_.boundary_dtype);
      const bool to_host = offload && int(boundaries_.size()) < first_on_device;
      boundaries_.push_back(to_host ? host_.put(boundary_slot(i), std::move(kept)) : std::move(kept));
    }
    LayerCache& cache = keep_all ? caches_[i] : scratch;
    layer_forward(ctx, params(l), x, cache);
    if (attention_offloaded_) {
      host_.put(attention_slot(i), cache.attn);
      host_.put(attention_slot(i) + 1, cache.lse);
    }
  }
  Tensor h = ops::uninitialized(DType::F32, {batch.n_rows(), c.hidden_size}, device_);
  ops::rms_norm(x, ck_.weights.output_norm, c.rms_eps, h);
  x_final_ = o.for_backward ? std::move(x) : Tensor();
  return h;
}

void TrainModel::backward(Tensor d_hidden) {
  BRIOCHE_CHECK(batch_ != nullptr, "train backward: no forward(for_backward) to differentiate");
  const auto& c = ck_.config;
  const int64_t n = batch_->n_rows();
  Tensor dx = ops::zeros(DType::F32, {n, c.hidden_size}, device_);
  ops::rms_norm_backward(x_final_, ck_.weights.output_norm, c.rms_eps, d_hidden, dx);
  x_final_ = Tensor(), d_hidden = Tensor();
  const LayerContext ctx = context(*batch_, layout_, forward_options_);
  const int first = first_trainable_layer(), n_layers = c.n_layers;
  if (options_.segment_size == 0) {
    for (int l = n_layers - 1; l >= first; --l) layer_backward(ctx, params(l), caches_[size_t(l - first)], dx);
  } else {
    const int seg = options_.segment_size;
    std::vector<LayerCache> segment(static_cast<size_t>(seg));
    host_.settle();  // the forward's last copies (done during the head)
    // Segment s's boundary (and its layers' attention outputs) on the device:
    // offloaded ones come back on the copy stream while the segment before
    // them (in backward order) computes.
    struct Saved {
      Tensor x;
      ops::PendingCopy copy;
      std::vector<HostOffload::Fetch> attention;  // attn, lse of each layer
    };
    auto fetch = [&](int s) {
      Saved g;
      const size_t i0 = size_t(s) * size_t(seg);
      Tensor boundary = std::move(boundaries_[size_t(s)]);  // (no longer needed once fetched)
      if (boundary.device() == device_) {
        g.x = boundary;  // the recompute may overwrite it
      } else {
        HostOffload::Fetch f = host_.fetch(boundary_slot(i0), device_);
        g.x = f.t;
        g.copy = std::move(f.copy);
      }
      for (size_t i = i0; attention_offloaded_ && i < std::min(i0 + size_t(seg), size_t(n_layers - first)); ++i) {
        g.attention.push_back(host_.fetch(attention_slot(i), device_));
        g.attention.push_back(host_.fetch(attention_slot(i) + 1, device_));
      }
      return g;
    };
    Saved next = fetch(int(boundaries_.size()) - 1);
    for (int s = int(boundaries_.size()) - 1; s >= 0; --s) {
      const int l0 = first + s * seg, l1 = std::min(n_layers, l0 + seg);
      Saved here = std::move(next);
      if (s > 0) next = fetch(s - 1);  // queued before this segment's kernels: it overlaps them
      here.copy.wait();
      for (HostOffload::Fetch& f : here.attention) f.copy.wait();
      // Recompute this segment, saving activations, from its f32 residual.
      Tensor x = here.x.dtype() == DType::F32 ? here.x : ops::convert(here.x, DType::F32);
      here.x = Tensor();
      for (int l = l0; l < l1; ++l) {
        LayerCache& cache = segment[size_t(l - l0)];
        if (attention_offloaded_) {  // the forward's attention output: the recompute skips the attention
          cache.attn = here.attention[size_t(2 * (l - l0))].t;
          cache.lse = here.attention[size_t(2 * (l - l0) + 1)].t;
          cache.attention_given = true;
        }
        layer_forward(ctx, params(l), x, cache);
      }
      x = Tensor();  // the segment's output: its backward needs only the caches
      for (int l = l1 - 1; l >= l0; --l) layer_backward(ctx, params(l), segment[size_t(l - l0)], dx);
    }
  }
  batch_ = nullptr;
  caches_.clear();
  boundaries_.clear();
}

size_t TrainModel::offloaded_attention_bytes() const {
  size_t n = 0;
  if (attention_offloaded_ && batch_ != nullptr)  // (the host buffers stay for the next step: count them while in use)
    for (size_t i = 0; i < size_t(ck_.config.n_layers - first_trainable_layer()); ++i)
      n += host_.bytes(attention_slot(i)) + host_.bytes(attention_slot(i) + 1);
  return n;
}

size_t TrainModel::saved_bytes() const {
  size_t n = x_final_.nbytes() + offloaded_attention_bytes();
  for (const auto& cache : caches_) n += bytes_of(cache);
  for (const auto& b : boundaries_) n += b.nbytes();
  return n;
}

size_t TrainModel::offloaded_bytes() const {
  size_t n = offloaded_attention_bytes();
  for (const auto& b : boundaries_)
    if (b.device() != device_) n += b.nbytes();
  return n;
}

}  // namespace brioche::train
