// libFuzzer target: GGUF header parsing from memory. Any input must either
// parse or throw brioche::Error; every parsed tensor must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::formats;
  try {
    auto file = GgufFile::parse(data, size, "fuzz.gguf");
    size_t checksum = 0;
    for (const auto& [key, value] : file->metadata()) checksum += value.describe().size() + key.size();
    for (const auto& info : file->tensors()) {
      if (info.offset + info.nbytes > size) std::abort();  // the parser promised otherwise
      brioche::Tensor t = file->tensor(info.name);
      if (t.nbytes() != info.nbytes) std::abort();
      if (info.nbytes > 0) {
        const auto* p = static_cast<const uint8_t*>(t.data());
        checksum += p[0] + p[info.nbytes - 1];  // ASan checks both ends are readable
      }
    }
    if (const GgufValue* arch = file->find("general.architecture")) {
      try {
        checksum += arch->as_string().size();
      } catch (const brioche::Error&) {
      }
    }
    volatile size_t sink = checksum;
    (void)sink;
  } catch (const brioche::Error&) {
  }
  return 0;
}
