// GgufValue: typed metadata values, their builders and checked accessors.
#include <bit>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"

namespace brioche::formats {

namespace {

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64: return true;
    default: return false;
  }
}

bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Range of values each integer type can hold; a builder refuses what would not
// survive the round trip through the file.
bool fits(GgufType t, int64_t v) {
  switch (t) {
    case GgufType::U8: return v >= 0 && v <= 0xff;
    case GgufType::I8: return v >= -128 && v <= 127;
    case GgufType::U16: return v >= 0 && v <= 0xffff;
    case GgufType::I16: return v >= -32768 && v <= 32767;
    case GgufType::U32: return v >= 0 && v <= 0xffffffffll;
    case GgufType::I32: return v >= INT32_MIN && v <= INT32_MAX;
    case GgufType::U64: return v >= 0;
    case GgufType::I64: return true;
    default: return false;
  }
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

void GgufValue::mismatch(std::string_view expected) const {
  fail("GGUF metadata ", key_.empty() ? std::string("value") : "key '" + key_ + "'", ": expected ", expected,
       ", found ", describe());
}

GgufValue GgufValue::integer(GgufType type, int64_t value) {
  BRIOCHE_CHECK(is_integer(type), "GgufValue::integer: ", gguf_type_name(type), " is not an integer type");
  BRIOCHE_CHECK(fits(type, value), "GgufValue::integer: ", value, " does not fit in ", gguf_type_name(type));
  GgufValue v;
  v.type_ = type;
  v.scalar_ = uint64_t(value);
  return v;
}

GgufValue GgufValue::floating(GgufType type, double value) {
  BRIOCHE_CHECK(is_float(type), "GgufValue::floating: ", gguf_type_name(type), " is not f32/f64");
  GgufValue v;
  v.type_ = type;
  v.scalar_ = std::bit_cast<uint64_t>(type == GgufType::F32 ? double(float(value)) : value);
  return v;
}

GgufValue GgufValue::boolean(bool value) {
  GgufValue v;
  v.type_ = GgufType::BOOL;
  v.scalar_ = value ? 1 : 0;
  return v;
}

GgufValue GgufValue::string(std::string value) {
  GgufValue v;
  v.type_ = GgufType::STRING;
  v.string_ = std::move(value);
  return v;
}

GgufValue GgufValue::ints(GgufType element_type, const std::vector<int64_t>& values) {
  BRIOCHE_CHECK(is_integer(element_type), "GgufValue::ints: ", gguf_type_name(element_type), " is not an integer type");
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.element_type_ = element_type;
  v.words_.reserve(values.size());
  for (int64_t x : values) {
    BRIOCHE_CHECK(fits(element_type, x), "GgufValue::ints: ", x, " does not fit in ", gguf_type_name(element_type));
    v.words_.push_back(uint64_t(x));
  }
  return v;
}

GgufValue GgufValue::floats(GgufType element_type, const std::vector<double>& values) {
  BRIOCHE_CHECK(is_float(element_type), "GgufValue::floats: ", gguf_type_name(element_type), " is not f32/f64");
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.element_type_ = element_type;
  v.words_.reserve(values.size());
  for (double x : values) {
    v.words_.push_back(std::bit_cast<uint64_t>(element_type == GgufType::F32 ? double(float(x)) : x));
  }
  return v;
}

GgufValue GgufValue::bools(const std::vector<bool>& values) {
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.element_type_ = GgufType::BOOL;
  for (bool b : values) v.words_.push_back(b ? 1 : 0);
  return v;
}

GgufValue GgufValue::strings(std::vector<std::string> values) {
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.element_type_ = GgufType::STRING;
  v.strings_ = std::move(values);
  return v;
}

GgufValue GgufValue::arrays(std::vector<GgufValue> values) {
  for (const auto& item : values) {
    BRIOCHE_CHECK(item.is_array(), "GgufValue::arrays: every element must be an array, found ", item.describe());
  }
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.element_type_ = GgufType::ARRAY;
  v.items_ = std::move(values);
  return v;
}

GgufType GgufValue::element_type() const {
  if (!is_array()) mismatch("array");
  return element_type_;
}

int64_t GgufValue::as_int() const {
  if (type_ == GgufType::BOOL) return int64_t(scalar_);
  if (!is_integer(type_)) mismatch("an integer");
  if (type_ == GgufType::U64 && scalar_ > uint64_t(INT64_MAX)) mismatch("an integer up to 2^63-1");
  return int64_t(scalar_);
}

uint64_t GgufValue::as_uint() const {
  if (!is_integer(type_)) mismatch("an integer");
  if (type_ != GgufType::U64 && int64_t(scalar_) < 0) mismatch("a non-negative integer");
  return scalar_;
}

double GgufValue::as_float() const {
  if (is_float(type_)) return std::bit_cast<double>(scalar_);
  if (type_ == GgufType::U64) return double(scalar_);
  if (is_integer(type_)) return double(int64_t(scalar_));
  mismatch("a number");
}

bool GgufValue::as_bool() const {
  if (type_ != GgufType::BOOL) mismatch("bool");
  return scalar_ != 0;
}

const std::string& GgufValue::as_string() const {
  if (type_ != GgufType::STRING) mismatch("string");
  return string_;
}

size_t GgufValue::array_size() const {
  if (!is_array()) mismatch("array");
  if (element_type_ == GgufType::STRING) return strings_.size();
  if (element_type_ == GgufType::ARRAY) return items_.size();
  return words_.size();
}

GgufValue GgufValue::at(size_t i) const {
  size_t n = array_size();
  if (i >= n) {
    fail("GGUF metadata ", key_.empty() ? std::string("array") : "key '" + key_ + "'", ": index ", i,
         " out of range for ", n, " elements");
  }
  if (element_type_ == GgufType::STRING) return string(strings_[i]);
  if (element_type_ == GgufType::ARRAY) return items_[i];
  GgufValue v;
  v.type_ = element_type_;
  v.scalar_ = words_[i];
  return v;
}

std::vector<std::string> GgufValue::as_strings() const { return string_list(); }

const std::vector<std::string>& GgufValue::string_list() const {
  if (!is_array() || element_type_ != GgufType::STRING) mismatch("array<string>");
  return strings_;
}

std::vector<float> GgufValue::as_floats() const {
  if (!is_array() || !(is_float(element_type_) || is_integer(element_type_))) {
    mismatch("array of numbers");
  }
  std::vector<float> out;
  out.reserve(words_.size());
  for (uint64_t w : words_) {
    if (is_float(element_type_))
      out.push_back(float(std::bit_cast<double>(w)));
    else if (element_type_ == GgufType::U64)
      out.push_back(float(w));
    else
      out.push_back(float(int64_t(w)));
  }
  return out;
}

std::vector<int64_t> GgufValue::as_ints() const {
  if (!is_array() || !(is_integer(element_type_) || element_type_ == GgufType::BOOL)) {
    mismatch("array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(words_.size());
  for (uint64_t w : words_) {
    if (element_type_ == GgufType::U64 && w > uint64_t(INT64_MAX)) {
      mismatch("array of integers up to 2^63-1");
    }
    out.push_back(int64_t(w));
  }
  return out;
}

const std::vector<GgufValue>& GgufValue::nested() const {
  if (!is_array() || element_type_ != GgufType::ARRAY) mismatch("array<array>");
  return items_;
}

std::string GgufValue::describe() const {
  std::ostringstream out;
  if (is_array()) {
    out << "array<" << gguf_type_name(element_type_) << ">[" << array_size() << "]";
    return out.str();
  }
  out << gguf_type_name(type_) << " ";
  if (type_ == GgufType::STRING) {
    out << '"' << (string_.size() > 40 ? string_.substr(0, 40) + "..." : string_) << '"';
  } else if (type_ == GgufType::BOOL) {
    out << (scalar_ ? "true" : "false");
  } else if (is_float(type_)) {
    out << std::bit_cast<double>(scalar_);
  } else if (type_ == GgufType::U64) {
    out << scalar_;
  } else {
    out << int64_t(scalar_);
  }
  return out.str();
}

}  // namespace brioche::formats
