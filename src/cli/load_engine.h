// Loading the engine for a command, with load errors as one-line usage errors.
#pragma once

#include <memory>

#include "cli/common.h"
#include "engine/engine.h"

namespace brioche::cli {

// Sizes the thread pool, resolves -m and loads model + tokenizer. A model the
// engine cannot use (missing, unknown architecture, corrupt) is a UsageError.
std::unique_ptr<engine::Engine> load_engine(const ModelFlags& flags, engine::EngineOptions options = {});

}  // namespace brioche::cli
