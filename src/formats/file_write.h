// Writing a serialized model file safely: the bytes go to "<path>.part" and
// replace `path` only once complete, so a failed write never leaves a
// truncated file where a good one was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace brioche::formats {

void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace brioche::formats
