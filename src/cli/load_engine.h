// Loading the model (and engine) for a command, with load errors as one-line
// usage errors.
#pragma once

#include <memory>

#include "cli/common.h"
#include "engine/engine.h"
#include "model/model.h"

namespace brioche::cli {

// Sizes the thread pool, resolves -m, loads the model on --device and merges
// --adapter into it. A model the program cannot use (missing, unknown
// architecture, corrupt, adapter of another shape) is a UsageError.
std::shared_ptr<model::Model> load_model(const ModelFlags& flags, int max_context = 0);

// load_model plus the tokenizer, KV cache and engine thread.
std::unique_ptr<engine::Engine> load_engine(const ModelFlags& flags, engine::EngineOptions options = {});

}  // namespace brioche::cli
