// Writing a serialized model file safely: the bytes go to "<path>.part" and
// replace `path` only once complete, so a failed write never leaves a
// truncated file where a good one was.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace brioche::formats {

// `write_body` streams the file's bytes (a writer need not hold a model's
// bytes a second time to serialize them).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write_body);

// The bytes `write_body` streams, in memory (a writer's serialize()).
std::vector<uint8_t> streamed_bytes(const std::function<void(std::ostream&)>& write_body);

}  // namespace brioche::formats
