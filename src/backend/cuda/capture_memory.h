// Memory of a CUDA graph while it is recorded (graph.cu) and afterwards.
//
// During a capture the caching allocator hands out blocks as usual, but a
// block freed inside the capture goes to the capture's own pool instead of
// the global cache: the graph's nodes keep using those addresses at every
// replay, so no later work may get them. Small host metadata uploaded during
// the capture (upload_cached) gets its own device buffer, filled once after
// the capture; a replay reads it as it was. Internal to backend/cuda.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

namespace brioche::cuda::detail {

struct CaptureMemory {
  std::map<size_t, std::vector<void*>> free;  // scratch blocks by size class, owned by the graph
  struct Upload {
    std::vector<char> bytes;       // host content at capture time
    std::shared_ptr<void> device;  // the buffer the graph reads
  };
  std::vector<Upload> uploads;
};

// The allocator side (runtime.cu).
void begin_capture_memory(CaptureMemory* memory);
void end_capture_memory();
void release_capture_memory(CaptureMemory& memory);
// The capture being recorded on this process, or nullptr.
CaptureMemory* recording_capture();

}  // namespace brioche::cuda::detail
