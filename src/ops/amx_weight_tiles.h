// A frozen quantized weight's bf16 AMX tiles (backend/cpu/amx_gemm.h), made
// once and kept with the weight's storage.
//
// A CPU training step multiplies through every base weight two or three
// times (the forward, its recompute, the input gradient), each product
// reading W as bf16 tiles of its own layout (Forward or InputGrad: AMX sums
// over pairs of t, and the two products pair different elements). Decoding
// the quantized rows into those tiles once a run, not once a call, takes the
// decode off every step; the tiles cost 2 bytes a weight element per layout.
#pragma once

#include <cstdint>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/matmul.h"
#include "core/tensor.h"

namespace brioche::ops {

// W's tiles for `product` (W a rank-2 CPU tensor that
// backend::cpu::amx_weight_products takes), made on the first call and
// remade when W's storage was written since (Storage::version); the sets of
// freed storages are dropped at the next call that makes tiles. Null where
// keeping them would take the tiles kept past BRIOCHE_CPU_AMX_TILES_MB (the
// product then decodes W per call). The pointer stays valid while W's
// storage lives and is not written.
const uint16_t* amx_weight_tiles(const Tensor& w, backend::cpu::AmxWeightProduct product);

// y = x·wᵀ of checked matmul arguments (ops/matmul_args.h) on AMX through
// w's kept tiles, where backend::cpu::amx_weight_products holds; false,
// doing nothing, elsewhere (the caller then runs ops::matmul).
bool training_matmul_on_amx(const Tensor& w, const cpu::MatmulArgs& b);

// Bytes of tiles kept now for live storages (for tests and reports).
size_t amx_weight_tiles_bytes();

}  // namespace brioche::ops
