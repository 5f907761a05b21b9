// Moving a loaded checkpoint's weights to a device (LoadOptions::device).
#pragma once

#include "model/weights.h"

namespace brioche::model {

// Copies every weight tensor to `device` in its stored dtype (quantized
// blocks stay quantized); tied embeddings stay one tensor. The host copies
// (often views of an mmap) are released.
void move_weights(Checkpoint& checkpoint, Device device);

}  // namespace brioche::model
