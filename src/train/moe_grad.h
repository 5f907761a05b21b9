// The part of a mixture-of-experts backward that both MoE models share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace brioche::train {

// One expert's share of the gradient of out[r] = Σ_k w_k · y_k over the
// batch rows routed to it: out[r] += w·y  ⇒  dw = d_out[r]·y,  dy = w·d_out[r].
// `rows` are the expert's batch rows, `slots` their (row·top_k + k) routing
// slots, `weights` their routing weights and `y` [m, hidden] the expert's
// output before the weight. Writes each row's dw (in double) into
// d_weight[slot] and returns dy [m, hidden].
Tensor expert_output_grad(const Tensor& d_out, std::span<const int32_t> rows, std::span<const int32_t> slots,
                          std::span<const float> weights, const Tensor& y, std::vector<double>& d_weight);

}  // namespace brioche::train
