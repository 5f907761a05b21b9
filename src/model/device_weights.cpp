#include "model/device_weights.h"

#include "ops/device.h"

namespace brioche::model {

void move_weights(Checkpoint& ck, Device device) {
  ModelWeights& w = ck.weights;
  auto move = [device](Tensor& t) { t = ops::to_device(t, device); };
  move(w.token_embd);
  if (ck.config.tied_embeddings) w.output = w.token_embd;
  else move(w.output);
  move(w.output_norm);
  for (LayerWeights& l : w.layers) {
    for (Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm,
                      &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      move(*t);
  }
  ops::synchronize(device);
}

}  // namespace brioche::model
