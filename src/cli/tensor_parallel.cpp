#include "cli/tensor_parallel.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli/workers.h"
#include "core/error.h"
#include "core/printable.h"
#include "model/llama.h"
#include "model/tensor_parallel.h"
#include "ops/collective.h"
#include "ops/rendezvous.h"

namespace brioche::cli {

namespace {

const WorkerFlags kTpFlags{.rank_flag = "--tp-rank", .master_flag = "--tp-master"};

}  // namespace

std::shared_ptr<model::Model> load_tensor_parallel(const ModelFlags& flags, const std::string& path,
                                                   model::LoadOptions options) {
  const int n = flags.tensor_parallel;
  if (options.device != Device::CUDA)
    throw UsageError{"--tensor-parallel " + std::to_string(n) + " needs CUDA GPUs (--device cuda)"};
  const int gpus = ops::device_count();
  const bool launcher = flags.tp_rank < 0;
  const int rank = launcher ? 0 : flags.tp_rank;
  if (rank >= n)
    throw UsageError{"--tp-rank " + std::to_string(rank) + " outside --tensor-parallel " + std::to_string(n)};
  if (launcher && n > gpus)
    throw UsageError{"--tensor-parallel " + std::to_string(n) + ": this machine has " + std::to_string(gpus) +
                     " GPU(s); start ranks on other nodes by hand with --tp-rank and --tp-master (docs/cuda.md)"};
  if (!launcher && flags.tp_master.empty()) throw UsageError{"--tp-rank needs --tp-master HOST:PORT of rank 0"};
  const std::string master =
      flags.tp_master.empty() ? "127.0.0.1:" + std::to_string(ops::free_tcp_port()) : flags.tp_master;
  std::vector<pid_t> workers;
  if (launcher)
    for (int r = 1; r < n; ++r) workers.push_back(start_worker(kTpFlags, r, master));

  ops::select_device(rank % gpus);  // several nodes: rank r uses local GPU r mod (GPUs per node)
  options.tp_rank = rank;
  options.tp_size = n;
  std::unique_ptr<model::Model> loaded = model::Model::load(path, options);
  std::unique_ptr<model::LlamaModel> shard(dynamic_cast<model::LlamaModel*>(loaded.release()));
  BRIOCHE_CHECK(shard != nullptr, "--tensor-parallel: ", path, " did not load as a Llama-family model");
  std::unique_ptr<ops::Collective> collective =
      ops::connect_nccl({.rank = rank, .size = n, .master = master, .timeout_s = 600});
  if (rank != 0) {
    try {
      model::run_tensor_parallel_worker(*shard, *collective);
    } catch (const Error& e) {
      std::fprintf(stderr, "brioche: tensor-parallel rank %d: %s\n", rank, printable(e.what()).c_str());
      std::fflush(nullptr);
      std::_Exit(kExitFailure);
    }
    shard.reset();
    collective.reset();
    std::fflush(nullptr);
    std::exit(kExitOk);  // the worker has no command of its own to run
  }
  auto* tp = new model::TensorParallelModel(std::move(shard), std::move(collective));
  auto watchdog = std::make_shared<WorkerWatchdog>(std::move(workers), "tensor-parallel worker");
  return std::shared_ptr<model::Model>(tp, [watchdog](model::Model* m) {
    watchdog->stop_expected();
    delete m;  // tells the workers to stop
    watchdog->join();
  });
}

}  // namespace brioche::cli
