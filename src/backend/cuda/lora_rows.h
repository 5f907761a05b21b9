// CUDA kernels of ops::lora_rows_add (Punica's shrink/expand split: rows
// grouped by adapter, two launches per projection, whatever the mix of
// adapters). Plain C++ header: the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

#include "backend/cpu/lora_rows.h"

namespace brioche::cuda {

// args.segments is host memory (passed to the kernels by value); x, y, u and
// the factors are device memory. Asynchronous on the current stream.
void lora_rows_add(const backend::cpu::LoraRowsArgs& args);

// The table path (ops::lora_table_add): every pointer in `args` is device
// memory, the row→slot map and the factors table included, so a captured
// launch serves any mix of adapters the table holds at replay. One launch
// each for up to three projections of one x (Q/K/V, gate/up).
void lora_table_shrink(const backend::cpu::LoraTableArgs& args);
void lora_table_expand(const backend::cpu::LoraTableArgs& args);

}  // namespace brioche::cuda
