#include "ops/amx_weight_tiles.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cpu/linear_backward.h"
#include "core/env_switch.h"

namespace brioche::ops {

namespace {

struct TileSet {
  std::weak_ptr<Storage> storage;  // W's: the set is dropped once it is freed
  uint64_t version = 0;            // its Storage::version when the tiles were made
  std::vector<uint16_t> tiles;
};

// (W's storage, byte offset in it, product, m, k, row bytes, dtype): views of
// one storage (the layers of a mapped file, a head's vocabulary chunks) each
// have their own set.
using Key = std::tuple<const Storage*, size_t, int, int64_t, int64_t, size_t, int>;

std::mutex g_lock;  // guards everything below
std::map<Key, TileSet> g_sets;
size_t g_bytes_kept = 0;

size_t budget_bytes() {
  static const size_t mb = size_t(std::max(0L, env_int("BRIOCHE_CPU_AMX_TILES_MB", 2048)));
  return mb << 20;
}

// Drops the sets of freed storages (a storage's address can be reused).
void drop_freed() {
  for (auto it = g_sets.begin(); it != g_sets.end();) {
    if (!it->second.storage.expired()) {
      ++it;
      continue;
    }
    g_bytes_kept -= it->second.tiles.size() * sizeof(uint16_t);
    it = g_sets.erase(it);
  }
}

}  // namespace

const uint16_t* amx_weight_tiles(const Tensor& w, backend::cpu::AmxWeightProduct product) {
  if (!w.defined() || w.device() != Device::CPU || w.rank() != 2) return nullptr;
  const backend::cpu::AmxWeight shape{.wtype = w.dtype(),
                                      .w = w.data(),
                                      .w_row_bytes = size_t(w.stride(0)),
                                      .m = w.dim(0),
                                      .k = w.dim(1),
                                      .product = product};
  const std::shared_ptr<Storage>& storage = w.storage();
  const Key key{storage.get(),   size_t(static_cast<const char*>(w.data()) - static_cast<const char*>(storage->data)),
                int(product),    shape.m,
                shape.k,         shape.w_row_bytes,
                int(shape.wtype)};
  std::lock_guard<std::mutex> hold(g_lock);
  auto it = g_sets.find(key);
  if (it != g_sets.end() && !it->second.storage.owner_before(storage) && !storage.owner_before(it->second.storage) &&
      it->second.version == storage->version)
    return it->second.tiles.data();
  drop_freed();  // (also a set whose storage died and whose address came back)
  it = g_sets.find(key);
  const size_t bytes = backend::cpu::amx_weight_tiles_size(shape) * sizeof(uint16_t);
  if (it == g_sets.end()) {
    if (g_bytes_kept + bytes > budget_bytes()) return nullptr;
    it = g_sets.try_emplace(key).first;
    it->second.storage = storage;
    it->second.tiles.resize(bytes / sizeof(uint16_t));
    g_bytes_kept += bytes;
  }
  backend::cpu::amx_pack_weight(shape, it->second.tiles.data());  // new, or W was written since
  it->second.version = storage->version;
  return it->second.tiles.data();
}

bool training_matmul_on_amx(const Tensor& w, const cpu::MatmulArgs& b) {
  if (!backend::cpu::amx_weight_products(b.wtype, b.n, b.m, b.k)) return false;
  return backend::cpu::training_matmul_amx({.x = b.x,
                                            .ldx = b.ldx,
                                            .wtype = b.wtype,
                                            .w = b.w,
                                            .w_row_bytes = b.w_row_bytes,
                                            .y = b.y,
                                            .ldy = b.ldy,
                                            .n = b.n,
                                            .m = b.m,
                                            .k = b.k,
                                            .w_tiles = amx_weight_tiles(w, backend::cpu::AmxWeightProduct::Forward)});
}

size_t amx_weight_tiles_bytes() {
  std::lock_guard<std::mutex> hold(g_lock);
  drop_freed();
  return g_bytes_kept;
}

}  // namespace brioche::ops
