#include "model/device_weights.h"

#include <initializer_list>

#include "ops/device.h"

namespace brioche::model {

namespace {

// Weights that multiply one input (Q, K, V; gate, up) go to one allocation,
// row after row, when they share a dtype and a width: a batch's matmul of
// them is then one GEMM over the stacked rows (backend/cuda/matmul.cu finds
// them by address). Llama-3-8B at 64 rows: Q, K and V took three cuBLASLt
// GEMMs and two split-K reductions, 34 µs a layer for 50 MB of weights.
void move_stacked(std::initializer_list<Tensor*> ts, Device device) {
  const Tensor& first = **ts.begin();
  bool stack = ts.size() > 1;
  int64_t rows = 0;
  for (const Tensor* t : ts) {
    stack = stack && t->defined() && t->rank() == 2 && t->dtype() == first.dtype() && t->dim(1) == first.dim(1) &&
            t->device() != device;
    if (stack) rows += t->dim(0);
  }
  if (!stack) {
    for (Tensor* t : ts) *t = ops::to_device(*t, device);
    return;
  }
  Tensor all = ops::uninitialized(first.dtype(), {rows, first.dim(1)}, device);
  int64_t row = 0;
  for (Tensor* t : ts) {
    Tensor part = all.slice(0, row, row + t->dim(0));
    ops::copy(*t, part);
    row += t->dim(0);
    *t = part;
  }
}

}  // namespace

void move_weights(Checkpoint& ck, Device device) {
  ModelWeights& w = ck.weights;
  auto move = [device](Tensor& t) { t = ops::to_device(t, device); };
  move(w.token_embd);
  if (ck.config.tied_embeddings)
    w.output = w.token_embd;
  else
    move(w.output);
  move(w.output_norm);
  for (LayerWeights& l : w.layers) {
    move_stacked({&l.wq, &l.wk, &l.wv}, device);
    move_stacked({&l.w_gate, &l.w_up}, device);
    for (Tensor* t : {&l.attn_norm, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm, &l.ffn_norm, &l.w_down})
      move(*t);
  }
  ops::synchronize(device);
}

}  // namespace brioche::model
