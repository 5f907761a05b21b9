#include "model/served_adapter.h"

#include "ops/device.h"

namespace brioche::model {

std::shared_ptr<ServedAdapter> copy_to_device(const ServedAdapter& adapter, Device device) {
  auto copy = std::make_shared<ServedAdapter>();
  copy->name = adapter.name;
  copy->path = adapter.path;
  copy->id = adapter.id;
  copy->rank = adapter.rank;
  copy->layers.resize(adapter.layers.size());
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int p = 0; p < kProjections; ++p) {
      const AdapterProjection& from = adapter.layers[l][size_t(p)];
      if (!from.a.defined()) continue;
      copy->layers[l][size_t(p)] = {.a = ops::to_device(from.a, device), .bt = ops::to_device(from.bt, device)};
    }
  }
  return copy;
}

}  // namespace brioche::model
