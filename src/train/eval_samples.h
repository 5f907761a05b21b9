// Greedy completions of a few held-out prompts with the adapter as it is,
// written at each evaluation (log.jsonl "sample" events and stderr), so a
// user sees the behaviour change beside the loss (the samples TRL users get
// from a generation callback). No KV cache: each new token runs the stack
// over the whole sequence again, which is cheap for the few short samples
// this is for (eval_samples × eval_sample_tokens forwards per evaluation).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/train_model.h"

namespace brioche::train {

// The tokenizer's side, given by the caller (the trainer has only token ids).
struct SampleDecoder {
  std::function<std::string(std::span<const int32_t>)> decode;
  std::vector<int32_t> stop_ids;  // end of turn / end of text: the completion ends there (not included)
};

// Up to max_tokens greedy tokens after `prompt`: argmax of the final hidden
// state's logits (w_out [vocab, hidden], any dtype) with the adapter on.
std::vector<int32_t> greedy_completion(TrainStack& model, const Tensor& w_out, std::span<const int32_t> prompt,
                                       int max_tokens, std::span<const int32_t> stop_ids);

}  // namespace brioche::train
