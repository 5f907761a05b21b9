// Truncated, corrupt and hostile GGUF headers: each must give a brioche::Error
// naming the file, the field and the byte offset, never a crash or a huge allocation.
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "formats_test_util.h"

namespace brioche::formats {
namespace {

using namespace testing;
using ::testing::HasSubstr;

// Hand-assembled GGUF bytes, so a test can place any value in any field.
struct GgufBytes {
  std::vector<uint8_t> bytes;
  template <typename T>
  GgufBytes& put(T v) {
    size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return *this;
  }
  GgufBytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  // One tensor info: name, dims (ne order), ggml type, relative offset.
  GgufBytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (uint64_t n : ne) put<uint64_t>(n);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  GgufBytes& pad(size_t alignment, size_t extra = 0) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    bytes.resize(bytes.size() + extra, 0);
    return *this;
  }
};

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { GgufFile::parse(bytes.data(), bytes.size(), "hostile.gguf"); });
}

TEST(GgufHostile, EveryPrefixOfASmallFileIsAnError) {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("n", GgufValue::integer(GgufType::U32, 7));
  w.add("list", GgufValue::strings({"ab", "c"}));
  w.add("nested", GgufValue::arrays({GgufValue::ints(GgufType::I8, {1, -1}), GgufValue::floats(GgufType::F64, {2})}));
  w.add("flag", GgufValue::boolean(true));
  Tensor a = Tensor::zeros(DType::F32, {2, 2});
  Tensor b = Tensor::zeros(DType::Q8_0, {1, 32});
  w.add_tensor("a", a);
  w.add_tensor("b", b);
  auto bytes = w.serialize();
  auto full = GgufFile::parse(bytes.data(), bytes.size(), "small.gguf");
  uint64_t data_end = 0;
  for (const auto& t : full->tensors()) data_end = std::max<uint64_t>(data_end, t.offset + t.nbytes);
  for (size_t len = 0; len < bytes.size(); ++len) {
    // A copy of exactly `len` bytes so AddressSanitizer sees any over-read.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    if (len >= data_end) {
      EXPECT_NO_THROW(GgufFile::parse(prefix.data(), len, "small.gguf")) << len;  // only padding missing
      continue;
    }
    std::string msg = error_of([&] { GgufFile::parse(prefix.data(), len, "small.gguf"); });
    ASSERT_THAT(msg, HasSubstr("small.gguf: ")) << "prefix " << len;
    ASSERT_THAT(msg, HasSubstr(" at byte ")) << "prefix " << len;
  }
}

TEST(GgufHostile, PrefixesOfTheDefaultModelHeaderAreErrors) {
  std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not found at " << path;
  auto mapping = MappedFile::open(path);
  auto file = GgufFile::parse(mapping->data(), mapping->size(), path);
  uint64_t header_end = file->data_offset();
  // About 200 cut points spread over the header, plus the first 64 bytes each.
  std::vector<size_t> cuts;
  for (size_t len = 0; len < 64; ++len) cuts.push_back(len);
  for (size_t len = 64; len < header_end; len += header_end / 200 + 7) cuts.push_back(len);
  cuts.push_back(header_end - 1);
  for (size_t len : cuts) {
    std::string msg = error_of([&] { GgufFile::parse(mapping->data(), len, "cut.gguf"); });
    ASSERT_THAT(msg, HasSubstr("cut.gguf: ")) << len;
    ASSERT_THAT(msg, HasSubstr(" at byte ")) << len;
  }
  // Cutting the data section leaves the header readable but the last tensor outside.
  std::string msg = error_of([&] { GgufFile::parse(mapping->data(), mapping->size() - 1, "cut.gguf"); });
  EXPECT_THAT(msg, HasSubstr("to lie within the file"));
}

TEST(GgufHostile, BadMagicAndVersions) {
  EXPECT_THAT(parse_error(GgufBytes().put<uint32_t>(0x46554746).put<uint32_t>(3).bytes),
              HasSubstr("hostile.gguf: magic at byte 0: expected \"GGUF\""));
  EXPECT_THAT(parse_error(GgufBytes().header(0, 0, 1).bytes),
              HasSubstr("version at byte 4: expected GGUF version 2 or 3, found 1"));
  EXPECT_THAT(parse_error(GgufBytes().header(0, 0, 7).bytes), HasSubstr("found 7"));
  EXPECT_THAT(parse_error(GgufBytes().header(0, 0, 0x03000000).bytes), HasSubstr("big-endian"));
  EXPECT_NO_THROW(GgufFile::parse(GgufBytes().header(0, 0).bytes.data(), 24, "empty.gguf"));
}

TEST(GgufHostile, HugeCountsAreBoundedByTheFileSize) {
  EXPECT_THAT(parse_error(GgufBytes().header(uint64_t(1) << 62, 0).bytes),
              HasSubstr("tensor count at byte 8: expected at most"));
  EXPECT_THAT(parse_error(GgufBytes().header(0, ~uint64_t(0)).bytes), HasSubstr("metadata count at byte 16"));
  // A key whose length claims 2^63 bytes.
  EXPECT_THAT(
      parse_error(GgufBytes().header(0, 1).put<uint64_t>(uint64_t(1) << 63).put<uint32_t>(0).put<uint8_t>(0).bytes),
      HasSubstr("metadata #0 key length at byte 24"));
  // An array of 2^40 u64 in a tiny file.
  auto arr = GgufBytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(10).put<uint64_t>(uint64_t(1) << 40);
  EXPECT_THAT(parse_error(arr.bytes), HasSubstr("metadata #0 ('k') value element count at byte 41"));
  // An array of 2^30 strings, each claiming only its length field.
  auto strs = GgufBytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 30);
  EXPECT_THAT(parse_error(strs.bytes), HasSubstr("element count"));
}

TEST(GgufHostile, BadValueTypesAndNesting) {
  EXPECT_THAT(parse_error(GgufBytes().header(0, 1).str("k").put<uint32_t>(13).put<uint64_t>(0).bytes),
              HasSubstr("metadata #0 ('k') type at byte 33: expected a GGUF value type 0..12, found 13"));
  EXPECT_THAT(parse_error(GgufBytes().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).bytes),
              HasSubstr("expected bool 0 or 1, found 2"));
  auto elem = GgufBytes().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(0);
  EXPECT_THAT(parse_error(elem.bytes), HasSubstr("element type at byte 37"));
  // Arrays nested 1000 deep: refused at depth 8, no stack exhaustion.
  GgufBytes deep = GgufBytes().header(0, 1).str("k").put<uint32_t>(9);
  for (int i = 0; i < 1000; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  EXPECT_THAT(parse_error(deep.bytes), HasSubstr("nested at most 8 deep"));
  auto dup =
      GgufBytes().header(0, 2).str("k").put<uint32_t>(0).put<uint8_t>(1).str("k").put<uint32_t>(0).put<uint8_t>(1);
  EXPECT_THAT(parse_error(dup.bytes), HasSubstr("expected a unique key, found 'k' again"));
}

TEST(GgufHostile, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    auto bytes = GgufBytes().header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(a).bytes;
    EXPECT_THAT(parse_error(bytes), HasSubstr("('general.alignment') value at byte 53: expected a power of two"));
  }
  auto wrong_type = GgufBytes().header(0, 1).str("general.alignment").put<uint32_t>(6).put<float>(32).bytes;
  EXPECT_THAT(parse_error(wrong_type), HasSubstr("expected u32, found f32 32"));
}

TEST(GgufHostile, BadTensorInfos) {
  auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    return GgufBytes().header(1, 0).tensor(name, std::move(ne), type, offset).pad(32, data).bytes;
  };
  EXPECT_NO_THROW(GgufFile::parse(one("ok", {4}, 0, 0, 16).data(), one("ok", {4}, 0, 0, 16).size(), "ok.gguf"));
  EXPECT_THAT(parse_error(one("t", {}, 0, 0, 0)),
              HasSubstr("tensor #0 ('t') n_dims at byte 33: expected 1..4, found 0"));
  EXPECT_THAT(parse_error(one("t", {1, 1, 1, 1, 1}, 0, 0, 0)), HasSubstr("expected 1..4, found 5"));
  EXPECT_THAT(parse_error(one("t", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 0)),
              HasSubstr("tensor #0 ('t') shape at byte 37: expected an element count below 2^63"));
  EXPECT_THAT(parse_error(one("t", {uint64_t(1) << 63}, 0, 0, 0)), HasSubstr("ne[0] at byte 37"));
  EXPECT_THAT(parse_error(one("t", {uint64_t(1) << 62}, 0, 0, 0)), HasSubstr("expected a byte size below 2^64"));
  EXPECT_THAT(parse_error(one("blk.0.ffn_up.weight", {32}, 6, 0, 32)),
              HasSubstr("unsupported tensor type 6 (Q5_0) for tensor 'blk.0.ffn_up.weight'"));
  EXPECT_THAT(parse_error(one("t", {32}, 999, 0, 32)), HasSubstr("unsupported tensor type 999 (unknown)"));
  EXPECT_THAT(parse_error(one("t", {33}, 8, 0, 64)),
              HasSubstr("expected a multiple of the q8_0 block size 32, found 33"));
  EXPECT_THAT(parse_error(one("t", {4}, 0, 8, 64)), HasSubstr("expected a multiple of the alignment 32, found 8"));
  EXPECT_THAT(parse_error(one("t", {4}, 0, 32, 16)),
              HasSubstr("tensor #0 ('t') data at byte 49: expected 16 bytes at data offset 32"));
  EXPECT_THAT(parse_error(one("t", {4}, 0, ~uint64_t(31), 16)), HasSubstr("beyond 2^64"));
  auto dup = GgufBytes().header(2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad(32, 64).bytes;
  EXPECT_THAT(parse_error(dup), HasSubstr("tensor #1 name at byte 57: expected a unique name, found 't' again"));
}

TEST(GgufHostile, OpenNamesTheFile) {
  EXPECT_THAT(error_of([] { GgufFile::open("/nonexistent/model.gguf"); }),
              HasSubstr("/nonexistent/model.gguf: cannot open"));
  TempDir dir;
  { std::ofstream(dir.file("empty.gguf")); }
  EXPECT_THAT(error_of([&] { GgufFile::open(dir.file("empty.gguf")); }),
              HasSubstr("empty.gguf: magic at byte 0: expected 4 bytes, found 0"));
  EXPECT_THAT(error_of([&] { GgufFile::open(dir.path().string()); }), HasSubstr("expected a regular file"));
}

}  // namespace
}  // namespace brioche::formats
