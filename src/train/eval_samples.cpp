#include "train/eval_samples.h"

#include <algorithm>

#include "core/error.h"
#include "ops/device.h"
#include "ops/gather_rows.h"
#include "ops/matmul.h"

namespace brioche::train {

std::vector<int32_t> greedy_completion(TrainStack& model, const Tensor& w_out, std::span<const int32_t> prompt,
                                       int max_tokens, std::span<const int32_t> stop_ids) {
  BRIOCHE_CHECK(!prompt.empty(), "greedy_completion: an empty prompt");
  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<int32_t> completion;
  for (int t = 0; t < max_tokens; ++t) {
    const int32_t n = int32_t(sequence.size());
    TokenBatch batch;
    batch.tokens = sequence;
    batch.positions.resize(size_t(n));
    for (int32_t i = 0; i < n; ++i) batch.positions[size_t(i)] = i;
    batch.branch.assign(size_t(n), 0);
    batch.spans = {ops::AttentionSpan{.first_row = 0, .n_rows = n}};
    batch.n_sequences = 1;
    const Tensor hidden = model.forward(batch, {.adapter_enabled = true, .for_backward = false});  // [n, H]
    Tensor last = ops::uninitialized(DType::F32, {1, hidden.dim(1)}, hidden.device());             // [1, H]
    const int32_t row = n - 1;
    ops::gather_rows(hidden, std::span<const int32_t>(&row, 1), last);
    Tensor logits = ops::uninitialized(DType::F32, {1, w_out.dim(0)}, hidden.device());  // [1, V]
    ops::matmul(last, w_out, logits);
    const Tensor host = ops::to_device(logits, Device::CPU);
    const float* z = host.data_as<float>();
    const int32_t next = int32_t(std::max_element(z, z + host.dim(1)) - z);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    completion.push_back(next);
    sequence.push_back(next);
  }
  return completion;
}

}  // namespace brioche::train
