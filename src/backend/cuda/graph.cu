// CUDA graphs (see graph.h). Captures run in relaxed mode so that the
// allocator may call cudaMalloc while recording (capture_memory.h).
#include "backend/cuda/capture_memory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/graph.h"

namespace brioche::cuda {

namespace {
thread_local const DecodeBinding* t_binding = nullptr;
}  // namespace

const DecodeBinding* decode_binding() { return t_binding; }

ScopedDecodeBinding::ScopedDecodeBinding(const DecodeBinding& binding) {
  BRIOCHE_CHECK(t_binding == nullptr, "cuda: a decode binding is already active");
  t_binding = &binding;
}

ScopedDecodeBinding::~ScopedDecodeBinding() { t_binding = nullptr; }

struct Graph::State {
  cudaGraphExec_t exec = nullptr;
  detail::CaptureMemory memory;

  ~State() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    detail::release_capture_memory(memory);
  }
};

Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

bool Graph::empty() const { return !state_ || state_->exec == nullptr; }

void Graph::capture(const std::function<void()>& record) {
  state_.reset();
  auto state = std::make_unique<State>();
  cudaStream_t s = detail::current_stream();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  detail::begin_capture_memory(&state->memory);
  cudaGraph_t graph = nullptr;
  try {
    record();
  } catch (...) {
    detail::end_capture_memory();
    cudaStreamEndCapture(s, &graph);  // leaves the stream usable
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  detail::end_capture_memory();
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  const cudaError_t err = cudaGraphInstantiate(&state->exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  // Constant metadata the graph reads, copied once before any replay.
  for (const auto& up : state->memory.uploads) copy_to_device(up.device.get(), up.bytes.data(), up.bytes.size());
  state_ = std::move(state);
}

void Graph::launch() {
  BRIOCHE_CHECK(!empty(), "cuda: launching a graph that recorded nothing");
  CUDA_CHECK(cudaGraphLaunch(state_->exec, detail::current_stream()));
}

}  // namespace brioche::cuda
