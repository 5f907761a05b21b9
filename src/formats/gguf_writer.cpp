// GGUF v3 writer: metadata in insertion order, tensors aligned in the data section.
#include <bit>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/file_write.h"

namespace brioche::formats {

namespace {

class ByteSink {
 public:
  std::vector<uint8_t> bytes;

  template <typename T>
  void put(T v) {
    size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
};

void put_scalar(ByteSink& out, GgufType t, uint64_t word) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL: out.put<uint8_t>(uint8_t(word)); break;
    case GgufType::U16:
    case GgufType::I16: out.put<uint16_t>(uint16_t(word)); break;
    case GgufType::U32:
    case GgufType::I32: out.put<uint32_t>(uint32_t(word)); break;
    case GgufType::U64:
    case GgufType::I64: out.put<uint64_t>(word); break;
    case GgufType::F32: out.put<float>(float(std::bit_cast<double>(word))); break;
    case GgufType::F64: out.put<double>(std::bit_cast<double>(word)); break;
    default: fail("GgufWriter: ", gguf_type_name(t), " is not a scalar type");
  }
}

void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type()) {
    case GgufType::STRING: out.put_string(v.as_string()); return;
    case GgufType::ARRAY: {
      out.put<uint32_t>(uint32_t(v.element_type()));
      out.put<uint64_t>(v.array_size());
      if (v.element_type() == GgufType::STRING) {
        for (const auto& s : v.string_list()) out.put_string(s);
      } else if (v.element_type() == GgufType::ARRAY) {
        for (const auto& item : v.nested()) {
          put_value(out, item);
        }
      } else {
        for (size_t i = 0; i < v.array_size(); ++i) {
          GgufValue e = v.at(i);
          uint64_t word = e.type() == GgufType::F32 || e.type() == GgufType::F64
                              ? std::bit_cast<uint64_t>(e.as_float())
                              : (e.type() == GgufType::U64 ? e.as_uint() : uint64_t(e.as_int()));
          put_scalar(out, v.element_type(), word);
        }
      }
      return;
    }
    case GgufType::F32:
    case GgufType::F64: put_scalar(out, v.type(), std::bit_cast<uint64_t>(v.as_float())); return;
    case GgufType::BOOL: put_scalar(out, v.type(), v.as_bool() ? 1 : 0); return;
    case GgufType::U64: put_scalar(out, v.type(), v.as_uint()); return;
    default: put_scalar(out, v.type(), uint64_t(v.as_int())); return;
  }
}

}  // namespace

void GgufWriter::add(std::string key, GgufValue value) {
  for (const auto& [k, v] : metadata_) {
    BRIOCHE_CHECK(k != key, "GgufWriter: metadata key '", key, "' added twice");
  }
  if (key == "general.alignment") {
    uint64_t a = value.as_uint();
    BRIOCHE_CHECK(a > 0 && (a & (a - 1)) == 0, "GgufWriter: general.alignment must be a power of two, got ", a);
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, const Tensor& tensor) {
  BRIOCHE_CHECK(tensor.defined() && tensor.device() == Device::CPU, "GgufWriter: tensor '", name,
                "' must be a defined CPU tensor");
  BRIOCHE_CHECK(tensor.is_contiguous(), "GgufWriter: tensor '", name, "' must be contiguous, got ", tensor.describe());
  dtype_to_ggml_type(tensor.dtype());  // throws for dtypes GGUF cannot hold
  for (const auto& t : tensors_) BRIOCHE_CHECK(t.name != name, "GgufWriter: tensor '", name, "' added twice");
  tensors_.push_back({std::move(name), tensor});
}

void GgufWriter::write_to(std::ostream& file) const {
  uint64_t alignment = 32;
  for (const auto& [k, v] : metadata_) {
    if (k == "general.alignment") alignment = v.as_uint();
  }
  ByteSink out;
  out.put<uint32_t>(0x46554747);  // "GGUF"
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    out.put_string(key);
    out.put<uint32_t>(uint32_t(value.type()));
    put_value(out, value);
  }
  auto padded = [&](uint64_t bytes) { return (bytes + alignment - 1) / alignment * alignment; };
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    const int rank = t.tensor.rank();
    out.put_string(t.name);
    out.put<uint32_t>(uint32_t(rank));
    for (int d = rank - 1; d >= 0; --d) out.put<uint64_t>(uint64_t(t.tensor.shape()[d]));  // ne[] order
    out.put<uint32_t>(dtype_to_ggml_type(t.tensor.dtype()));
    out.put<uint64_t>(offset);
    offset += padded(t.tensor.nbytes());
  }
  out.pad_to(alignment);
  // The header, then each tensor's bytes straight from its storage.
  file.write(reinterpret_cast<const char*>(out.bytes.data()), std::streamsize(out.bytes.size()));
  const std::vector<char> zeros(alignment, 0);
  for (const auto& t : tensors_) {
    const uint64_t n = t.tensor.nbytes();
    file.write(static_cast<const char*>(t.tensor.data()), std::streamsize(n));
    file.write(zeros.data(), std::streamsize(padded(n) - n));
  }
}

std::vector<uint8_t> GgufWriter::serialize() const {
  return streamed_bytes([&](std::ostream& out) { write_to(out); });
}

void GgufWriter::write(const std::string& path) const {
  write_file_atomically(path, [&](std::ostream& out) { write_to(out); });
}

}  // namespace brioche::formats
