// libFuzzer target: safetensors header parsing from memory. Any input must
// either parse or throw brioche::Error; every tensor's bytes must lie inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::formats;
  try {
    auto file = SafetensorsFile::parse(data, size, "fuzz.safetensors");
    size_t checksum = 0;
    for (const auto& info : file->tensors()) {
      if (info.begin > info.end || info.end > size) std::abort();  // the parser promised otherwise
      RawTensor raw = file->raw(info.name);
      if (raw.nbytes > 0) checksum += raw.data[0] + raw.data[raw.nbytes - 1];
      try {
        brioche::Tensor t = file->tensor(info.name);
        if (t.nbytes() != raw.nbytes) std::abort();
      } catch (const brioche::Error&) {
      }
    }
    volatile size_t sink = checksum;
    (void)sink;
  } catch (const brioche::Error&) {
  }
  return 0;
}
