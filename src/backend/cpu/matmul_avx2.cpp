// Matmul kernels compiled for avx2 (see matmul_kernels.inc for the code).
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

#include <immintrin.h>

#define BR_AVX512 0
#define BR_VNNI 0
#define BR_KERNELS matmul_kernels_avx2
#include "backend/cpu/matmul_kernels.inc"
