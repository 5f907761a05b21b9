// safetensors writer: JSON header (padded with spaces to a multiple of 8 so the
// data section stays aligned), then tensors back to back in name order.
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "formats/file_write.h"

namespace brioche::formats {

void SafetensorsWriter::add(std::string name, const Tensor& tensor) {
  BRIOCHE_CHECK(tensor.defined() && tensor.device() == Device::CPU, "SafetensorsWriter: tensor '", name,
                "' must be a defined CPU tensor");
  BRIOCHE_CHECK(tensor.is_contiguous(), "SafetensorsWriter: tensor '", name, "' must be contiguous, got ",
                tensor.describe());
  std::string dtype;
  switch (tensor.dtype()) {
    case DType::F32: dtype = "F32"; break;
    case DType::F16: dtype = "F16"; break;
    case DType::BF16: dtype = "BF16"; break;
    case DType::I32: dtype = "I32"; break;
    default:
      fail("SafetensorsWriter: tensor '", name, "' has dtype ", dtype_name(tensor.dtype()),
           ", expected f32, f16, bf16 or i32");
  }
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().begin() + tensor.rank());
  check_entry(name, dtype, shape, tensor.nbytes());
  auto owner = std::make_shared<const Tensor>(tensor);
  const auto* data = static_cast<const uint8_t*>(owner->data());
  tensors_.emplace(std::move(name),
                   PendingTensor{std::move(dtype), std::move(shape), std::move(owner), data, tensor.nbytes()});
}

void SafetensorsWriter::add_raw(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
                                size_t nbytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  add_raw(std::move(name), std::move(dtype), std::move(shape), std::vector<uint8_t>(p, p + nbytes));
}

void SafetensorsWriter::add_raw(std::string name, std::string dtype, std::vector<int64_t> shape,
                                std::vector<uint8_t> bytes) {
  check_entry(name, dtype, shape, bytes.size());
  auto owner = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* data = owner->data();
  const size_t size = owner->size();
  tensors_.emplace(std::move(name), PendingTensor{std::move(dtype), std::move(shape), std::move(owner), data, size});
}

void SafetensorsWriter::check_entry(const std::string& name, const std::string& dtype,
                                    const std::vector<int64_t>& shape, size_t nbytes) const {
  BRIOCHE_CHECK(name != "__metadata__" && !name.empty(), "SafetensorsWriter: invalid tensor name '", name, "'");
  int elem = safetensors_dtype_size(dtype);
  BRIOCHE_CHECK(elem > 0, "SafetensorsWriter: tensor '", name, "' has unknown dtype ", dtype);
  uint64_t numel = 1;
  for (int64_t d : shape) {
    BRIOCHE_CHECK(d >= 0, "SafetensorsWriter: tensor '", name, "' has a negative dim ", d);
    numel *= uint64_t(d);
  }
  BRIOCHE_CHECK(numel * uint64_t(elem) == nbytes, "SafetensorsWriter: tensor '", name, "' expected ",
                numel * uint64_t(elem), " bytes for its shape, found ", nbytes);
  BRIOCHE_CHECK(tensors_.count(name) == 0, "SafetensorsWriter: tensor '", name, "' added twice");
}

void SafetensorsWriter::set_metadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }

void SafetensorsWriter::write_to(std::ostream& out) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.size}}};
    offset += t.size;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), std::streamsize(len));
  for (const auto& [name, t] : tensors_) out.write(reinterpret_cast<const char*>(t.data), std::streamsize(t.size));
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  return streamed_bytes([&](std::ostream& out) { write_to(out); });
}

void SafetensorsWriter::write(const std::string& path) const {
  write_file_atomically(path, [&](std::ostream& out) { write_to(out); });
}

}  // namespace brioche::formats
