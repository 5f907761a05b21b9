#include "ops/device_graph.h"

#include <optional>

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

// The step bound on this thread: its binding (which the launchers read
// through cuda::decode_binding(), so ScopedWindowTables may change its
// tables in place) and its window tables.
struct BoundStep {
  cuda::DecodeBinding binding;
  const int32_t* main_tables = nullptr;
  const int32_t* window_tables = nullptr;  // null: the cache has no window pool
};
thread_local BoundStep* t_bound = nullptr;

// Binds `in` for the scope's lifetime.
class BindStep {
 public:
  explicit BindStep(const DecodeInputs& in) {
    step_.binding = binding_of(in);
    step_.main_tables = step_.binding.tables;
    if (in.window_tables.defined()) {
      BRIOCHE_CHECK(in.window_tables.device() == Device::CUDA && in.window_tables.dtype() == DType::I32 &&
                        in.window_tables.is_contiguous() && in.window_tables.rank() == 2 &&
                        in.window_tables.dim(0) == in.tables.dim(0) && in.window_tables.dim(1) == in.tables.dim(1),
                    "DecodeGraph: window tables must be contiguous i32 CUDA tensors shaped like the tables ",
                    in.tables.describe(), ", got ", in.window_tables.describe());
      step_.window_tables = in.window_tables.data_as<int32_t>();
    }
    bind_.emplace(step_.binding);
    t_bound = &step_;
  }
  ~BindStep() { t_bound = nullptr; }
  BindStep(const BindStep&) = delete;
  BindStep& operator=(const BindStep&) = delete;

 private:
  BoundStep step_;
  std::optional<cuda::ScopedDecodeBinding> bind_;  // declared last: unbound before step_ goes
};

}  // namespace

void DecodeGraph::run_eagerly(const DecodeInputs& in, const std::function<void()>& record) {
  BindStep bind(in);
  record();
}

void DecodeGraph::capture(const DecodeInputs& in, const std::function<void()>& record) {
  auto impl = std::make_unique<Impl>();
  BindStep bind(in);
  impl->graph.capture(record);
  impl_ = std::move(impl);
}

ScopedWindowTables::ScopedWindowTables(bool on) {
  if (!on || t_bound == nullptr) return;
  BRIOCHE_CHECK(t_bound->window_tables != nullptr,
                "DecodeGraph: a layer reads the window pool but the bound step has no window tables "
                "(DecodeInputs::window_tables)");
  t_bound->binding.tables = t_bound->window_tables;
  swapped_ = true;
}

ScopedWindowTables::~ScopedWindowTables() {
  if (swapped_ && t_bound != nullptr) t_bound->binding.tables = t_bound->main_tables;
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
ScopedWindowTables::ScopedWindowTables(bool) {}
ScopedWindowTables::~ScopedWindowTables() = default;
bool decode_graphs_enabled() { return false; }

#endif

DecodeGraph::DecodeGraph() = default;
DecodeGraph::~DecodeGraph() = default;
DecodeGraph::DecodeGraph(DecodeGraph&&) noexcept = default;
DecodeGraph& DecodeGraph::operator=(DecodeGraph&&) noexcept = default;

}  // namespace brioche::ops
