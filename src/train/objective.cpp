#include "train/objective.h"

#include <utility>

#include "ops/device.h"

namespace brioche::train {

LossValue run_objective(TrainStack& model, LogpHead& head, const TokenBatch& batch, const LossConfig& config,
                        std::span<const SequenceLogps> reference, const ObjectiveOptions& o) {
  const ForwardOptions fo{.dropout_seed = o.dropout_seed, .adapter_enabled = true, .for_backward = o.backward};
  Tensor hidden = o.prefix_out ? model.forward(batch, *o.prefix_out, fo) : model.forward(batch, fo);  // [n, H]
  const std::vector<float> logp = head.forward(hidden, batch.scored);
  const auto seqs = sequence_logps(batch.scored, logp, batch.n_sequences);
  LossValue loss = compute_loss(config, seqs, reference);
  if (o.backward) {
    const std::vector<float> d_logp = token_grads(batch.scored, loss, o.grad_scale);
    Tensor d_hidden = ops::uninitialized(DType::F32, {hidden.dim(0), hidden.dim(1)},
                                         hidden.device());  // [n, H], the head writes it whole
    hidden = Tensor();  // (the head keeps the rows it scores; the stack's backward does not need these)
    head.backward(d_logp, d_hidden);
    model.backward(std::move(d_hidden));
  }
  return loss;
}

std::vector<SequenceLogps> batch_logps(TrainStack& model, LogpHead& head, const TokenBatch& batch, bool adapter_enabled,
                                       const Tensor* prefix_out) {
  const ForwardOptions fo{.adapter_enabled = adapter_enabled, .for_backward = false};
  Tensor hidden = prefix_out ? model.forward(batch, *prefix_out, fo) : model.forward(batch, fo);
  return sequence_logps(batch.scored, head.forward(hidden, batch.scored), batch.n_sequences);
}

}  // namespace brioche::train
