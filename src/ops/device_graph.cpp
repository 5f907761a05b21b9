#include "ops/device_graph.h"

#include "core/env_switch.h"
#include "core/error.h"
#if BRIOCHE_CUDA
#include "backend/cuda/graph.h"
#endif

namespace brioche::ops {

#if BRIOCHE_CUDA

struct DecodeGraph::Impl {
  cuda::Graph graph;
};

namespace {

cuda::DecodeBinding binding_of(const DecodeInputs& in) {
  BRIOCHE_CHECK(
      in.tokens.device() == Device::CUDA && in.positions.device() == Device::CUDA && in.tables.device() == Device::CUDA,
      "DecodeGraph: inputs must be CUDA tensors");
  BRIOCHE_CHECK(in.tokens.dtype() == DType::I32 && in.positions.dtype() == DType::I32 &&
                    in.tables.dtype() == DType::I32 && in.tables.rank() == 2 && in.tables.is_contiguous(),
                "DecodeGraph: inputs must be i32 tokens [n], positions [n] and contiguous tables [n, width], got ",
                in.tokens.describe(), ", ", in.positions.describe(), ", ", in.tables.describe());
  const int64_t n = in.tokens.numel();
  BRIOCHE_CHECK(in.positions.numel() == n && in.tables.dim(0) == n, "DecodeGraph: ", n, " tokens but ",
                in.positions.numel(), " positions and ", in.tables.dim(0), " block tables");
  return {.tokens = in.tokens.data_as<int32_t>(),
          .positions = in.positions.data_as<int32_t>(),
          .tables = in.tables.data_as<int32_t>(),
          .n_rows = int(n),
          .table_stride = int(in.tables.dim(1)),
          .max_keys = in.max_keys,
          .rows_share_sequences = in.rows_share_sequences};
}

}  // namespace

void DecodeGraph::run_eagerly(const DecodeInputs& in, const std::function<void()>& record) {
  const cuda::DecodeBinding binding = binding_of(in);
  cuda::ScopedDecodeBinding bind(binding);
  record();
}

void DecodeGraph::capture(const DecodeInputs& in, const std::function<void()>& record) {
  const cuda::DecodeBinding binding = binding_of(in);
  auto impl = std::make_unique<Impl>();
  cuda::ScopedDecodeBinding bind(binding);
  impl->graph.capture(record);
  impl_ = std::move(impl);
}

void DecodeGraph::launch() {
  BRIOCHE_CHECK(!empty(), "DecodeGraph: launch before capture");
  impl_->graph.launch();
}

bool DecodeGraph::empty() const { return !impl_ || impl_->graph.empty(); }

bool decode_graphs_enabled() { return env_switch_on("BRIOCHE_CUDA_GRAPHS"); }

#else

struct DecodeGraph::Impl {};

void DecodeGraph::capture(const DecodeInputs&, const std::function<void()>&) {
  fail("DecodeGraph: CUDA graphs need the CUDA backend (configure with --preset cuda)");
}
void DecodeGraph::run_eagerly(const DecodeInputs&, const std::function<void()>&) {
  fail("DecodeGraph: CUDA graphs need the CUDA backend (configure with --preset cuda)");
}
void DecodeGraph::launch() { fail("DecodeGraph: CUDA graphs need the CUDA backend (configure with --preset cuda)"); }
bool DecodeGraph::empty() const { return true; }
bool decode_graphs_enabled() { return false; }

#endif

DecodeGraph::DecodeGraph() = default;
DecodeGraph::~DecodeGraph() = default;
DecodeGraph::DecodeGraph(DecodeGraph&&) noexcept = default;
DecodeGraph& DecodeGraph::operator=(DecodeGraph&&) noexcept = default;

}  // namespace brioche::ops
