#include "train/data_parallel.h"

#include "ops/device.h"

namespace brioche::train {

void all_reduce_gradients(LoraAdapter& adapter, ops::Collective& collective) {
  LoraFlat& flat = adapter.flat();
  for (Tensor* grads : {&flat.grad_a, &flat.grad_b})
    if (grads->numel() > 0) collective.all_reduce_sum(*grads);
}

std::vector<double> all_reduce_host_sums(std::span<const double> values, ops::Collective& collective, Device device) {
  const int64_t n = int64_t(values.size());
  std::vector<float> host(values.begin(), values.end());
  Tensor sums = ops::zeros(DType::F32, {n}, device);
  ops::copy(Tensor::view(host.data(), DType::F32, &n, 1, nullptr, Device::CPU), sums);
  collective.all_reduce_sum(sums);
  Tensor back = ops::to_device(sums, Device::CPU);
  return std::vector<double>(back.data_as<float>(), back.data_as<float>() + n);
}

}  // namespace brioche::train
