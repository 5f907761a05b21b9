#include "ops/rope.h"

#include <cmath>
#include <numbers>

#include "backend/cpu/rope.h"
#include "ops/check_f32.h"
#include "ops/rope_args.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

std::vector<float> rope_inv_freq(int rotary_dims, float theta, const RopeScaling& scaling,
                                 std::span<const float> freq_factors) {
  BRIOCHE_CHECK(rotary_dims > 0 && rotary_dims % 2 == 0, "rope: rotary dims must be even, got ", rotary_dims);
  const int half = rotary_dims / 2;
  BRIOCHE_CHECK(freq_factors.empty() || int(freq_factors.size()) == half, "rope: expected ", half,
                " frequency factors, found ", freq_factors.size());
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    // Rounded to f32 first, as torch builds it (base ** (arange(0, d, 2) / d)).
    float w = float(1.0 / std::pow(double(theta), double(2 * i) / double(rotary_dims)));
    switch (scaling.kind) {
      case RopeScalingKind::None: break;
      case RopeScalingKind::Linear: w = w / scaling.factor; break;
      case RopeScalingKind::Llama3: {
        // Wavelength 2π/w against the original context: long waves are
        // interpolated by `factor`, short ones kept, medium ones blended.
        float old_ctx = float(scaling.original_context);
        float low_freq_wavelen = old_ctx / scaling.low_freq_factor;
        float high_freq_wavelen = old_ctx / scaling.high_freq_factor;
        float wavelen = 2.0f * std::numbers::pi_v<float> / w;
        if (wavelen > low_freq_wavelen) {
          w = w / scaling.factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          float smooth =
              (old_ctx / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
          w = (1.0f - smooth) * w / scaling.factor + smooth * w;
        }
        break;
      }
    }
    if (!freq_factors.empty()) w = w / freq_factors[i];
    inv_freq[i] = w;
  }
  return inv_freq;
}

namespace detail {

backend::cpu::RopeArgs rope_args(Tensor& x, std::span<const int32_t> positions, const RopeParams& p) {
  auto rows = f32_rows(x, "rope", "x");
  BRIOCHE_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0, "rope: head_dim must be even, got ", p.head_dim);
  BRIOCHE_CHECK(rows.dim == int64_t(p.n_heads) * p.head_dim, "rope: x must be [n, ", p.n_heads, " * ", p.head_dim,
                "], got ", x.describe());
  BRIOCHE_CHECK(int64_t(positions.size()) == rows.n_rows, "rope: ", positions.size(), " positions for ", rows.n_rows,
                " rows");
  BRIOCHE_CHECK(int(p.inv_freq.size()) == p.head_dim / 2, "rope: expected ", p.head_dim / 2,
                " inverse frequencies, found ", p.inv_freq.size());
  return {.x = rows.data,
          .positions = positions.data(),
          .inv_freq = p.inv_freq.data(),
          .n_rows = rows.n_rows,
          .x_stride = rows.stride,
          .n_heads = p.n_heads,
          .head_dim = p.head_dim,
          .interleaved = p.style == RopeStyle::Interleaved};
}

}  // namespace detail

void rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& p) {
  x.note_written();
  const backend::cpu::RopeArgs args = detail::rope_args(x, positions, p);
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::rope(args);  // positions and frequencies are uploaded
#else
    detail::fail_no_cuda("rope");
#endif
  }
  backend::cpu::rope(args);
}

}  // namespace brioche::ops
