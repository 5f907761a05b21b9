// Matmul kernels compiled for avx512_vnni (see matmul_kernels.inc for the code).
// Standard headers come first so none of their inline functions are
// compiled for the wider target below.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant_ref.h"
#include "core/error.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#include <immintrin.h>

// GCC 12 flags the deliberately undefined registers inside its own AVX-512
// intrinsics (`__Y = __Y`) as uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define BR_AVX512 1
#define BR_VNNI 1
#define BR_KERNELS matmul_kernels_avx512_vnni
#include "backend/cpu/matmul_kernels.inc"
