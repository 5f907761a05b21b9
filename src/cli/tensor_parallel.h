// --tensor-parallel N for every command that loads a model: rank 0 (this
// process) re-executes the program N−1 times with hidden flags
// (--tp-rank R --tp-master 127.0.0.1:PORT); each worker loads its shard on
// GPU R, joins NCCL and serves rank 0's batches until rank 0's model is
// destroyed, then exits without running the command itself.
#pragma once

#include <memory>
#include <string>

#include "cli/common.h"
#include "model/model.h"

namespace brioche::cli {

// Rank 0: the TensorParallelModel (its deleter waits for the workers).
// A worker rank: runs its loop and exits the process; never returns.
std::shared_ptr<model::Model> load_tensor_parallel(const ModelFlags& flags, const std::string& path,
                                                   model::LoadOptions options);

}  // namespace brioche::cli
