#include "model/adapter_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "core/error.h"
#include "model/served_adapter.h"

namespace brioche::model {

namespace {

constexpr size_t kWordsPerEntry = sizeof(backend::cpu::LoraFactors) / 4;

size_t slot_words(int32_t rows) { return size_t(rows + 1) / 2 * 2; }  // even: the factors start 8-byte aligned

}  // namespace

size_t adapter_table_words(int32_t rows, int32_t slots, int32_t n_layers) {
  return slot_words(rows) + size_t(slots) * size_t(n_layers) * kBlockProjections * kWordsPerEntry;
}

int32_t adapter_rank_cap(const ForwardBatch& batch) {
  int32_t rank = 0;
  for (const SequenceView& s : batch.sequences)
    if (s.adapter != nullptr) rank = std::max(rank, s.adapter->rank);
  return rank == 0 ? 0 : std::max<int32_t>(8, int32_t(std::bit_ceil(uint32_t(rank))));
}

void fill_adapter_table(const ForwardBatch& batch, int32_t rows, int32_t slots, int32_t n_layers,
                        std::span<int32_t> words) {
  BRIOCHE_CHECK(rows >= batch.n_rows() && words.size() == adapter_table_words(rows, slots, n_layers),
                "fill_adapter_table: expected ", adapter_table_words(rows, slots, n_layers), " words for ", rows,
                " rows and ", slots, " slots (batch of ", batch.n_rows(), " rows), got ", words.size());
  std::fill(words.begin(), words.end(), 0);
  int32_t* row_slot = words.data();
  std::fill(row_slot, row_slot + rows, -1);
  auto* factors = reinterpret_cast<backend::cpu::LoraFactors*>(words.data() + slot_words(rows));
  std::vector<const ServedAdapter*> adapters;  // by slot
  const int32_t slot_stride = n_layers * kBlockProjections;
  for (const SequenceView& s : batch.sequences) {
    if (s.adapter == nullptr || s.n_rows == 0) continue;
    const ServedAdapter& ad = *s.adapter;
    auto found = std::find(adapters.begin(), adapters.end(), &ad);
    const int32_t slot = int32_t(found - adapters.begin());
    if (found == adapters.end()) {
      BRIOCHE_CHECK(int32_t(ad.layers.size()) == n_layers, "forward: adapter '", ad.name, "' has ", ad.layers.size(),
                    " layers, the model ", n_layers);
      BRIOCHE_CHECK(slot < slots, "fill_adapter_table: the batch has more than ", slots, " adapters");
      adapters.push_back(&ad);
      for (int32_t layer = 0; layer < n_layers; ++layer)
        for (int p = kBlockProjections; p < kProjections; ++p)
          BRIOCHE_CHECK(ad.projection(layer, Projection(p)) == nullptr, "forward: adapter '", ad.name, "' adapts ",
                        projection_name(Projection(p)), " of layer ", layer,
                        ", which the Llama blocks do not have (the table holds q/k/v/o and gate/up/down)");
      for (int32_t layer = 0; layer < n_layers; ++layer)
        for (int p = 0; p < kBlockProjections; ++p) {
          const AdapterProjection* ap = ad.projection(layer, Projection(p));
          if (ap == nullptr) continue;
          BRIOCHE_CHECK(ap->a.dtype() == DType::F16 && ap->bt.dtype() == DType::F16 && ap->a.rank() == 2 &&
                            ap->bt.rank() == 2 && ap->a.is_contiguous() && ap->bt.is_contiguous() &&
                            ap->a.dim(0) == ap->bt.dim(0) && ap->a.device() == Device::CUDA &&
                            ap->bt.device() == Device::CUDA,
                        "forward: adapter '", ad.name, "' layer ", layer, " projection ", p,
                        ": expected contiguous f16 factors of one rank on the CUDA device, got ", ap->a.describe(),
                        " and ", ap->bt.describe());
          factors[size_t(slot) * size_t(slot_stride) + size_t(layer) * kBlockProjections + size_t(p)] = {
              .a = ap->a.data_as<uint16_t>(), .bt = ap->bt.data_as<uint16_t>(), .rank = int32_t(ap->a.dim(0))};
        }
    }
    std::fill(row_slot + s.first_row, row_slot + s.first_row + s.n_rows, slot);
  }
}

AdapterTable adapter_table_views(const Tensor& block, int32_t rows, int32_t slots, int32_t n_layers, int32_t rank_cap,
                                 const Tensor& u) {
  BRIOCHE_CHECK(block.dtype() == DType::I32 && block.rank() == 1 &&
                    size_t(block.dim(0)) == adapter_table_words(rows, slots, n_layers),
                "adapter_table_views: expected i32 [", adapter_table_words(rows, slots, n_layers), "], got ",
                block.describe());
  const int64_t first_factor = int64_t(slot_words(rows));
  return {.row_slot = block.slice(0, 0, rows),
          .factors = block.slice(0, first_factor, block.dim(0)),
          .slot_stride = n_layers * kBlockProjections,
          .rank_cap = rank_cap,
          .u = u};
}

}  // namespace brioche::model
