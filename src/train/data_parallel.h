// Data-parallel LoRA training: N ranks (one process and one GPU each) share
// every optimizer step.
//
// A global step is N·A micro-batches (A = grad_accumulation_steps). Every
// rank draws the same shuffled example order and walks all N·A micro-batches
// of the step, but runs only those with global index g ≡ rank (mod N), each
// with gradient scale 1/(N·A) and the dropout seed of index g. One f32
// all-reduce per step then sums the LoRA gradient buffers (and the loss and
// token sums), so every rank clips and applies AdamW to the same gradient:
// N ranks with accumulation A compute what one GPU computes with
// accumulation N·A, up to the order of the f32 sums.
#pragma once

#include <span>
#include <vector>

#include "ops/collective.h"
#include "train/lora.h"

namespace brioche::train {

struct DataParallelShare {
  int rank = 0;
  int size = 1;
  int grad_accumulation = 1;  // micro-batches per rank per step

  int micro_batches_per_step() const { return size * grad_accumulation; }
  // Whether this rank runs global micro-batch g of a step.
  bool runs(int global_micro) const { return global_micro % size == rank; }
  // Gradient scale of one micro-batch: the step's gradient is their mean.
  double grad_scale() const { return 1.0 / double(micro_batches_per_step()); }
};

// grad_a and grad_b of `adapter` summed over the ranks, in place (f32,
// on the adapter's device).
void all_reduce_gradients(LoraAdapter& adapter, ops::Collective& collective);

// Host values summed over the ranks (through an f32 tensor on `device`;
// for loss and token sums, where f32 is plenty).
std::vector<double> all_reduce_host_sums(std::span<const double> values, ops::Collective& collective, Device device);

}  // namespace brioche::train
