// Files a model is read from (formats/regular_file.h): FIFOs, devices and
// directories are refused before they are opened (a FIFO used to block
// forever), reads are bounded by the size, and zero or overflowing tensor
// dims are refused where the readers map them.
#include <sys/stat.h>

#include <chrono>
#include <future>

#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "formats_test_util.h"

namespace brioche::formats {
namespace {

using namespace testing;
using ::testing::HasSubstr;

// Runs fn on another thread; a test failure (not a hang) when it takes more than 10 s.
template <typename Fn>
std::string error_within_seconds(Fn fn) {
  auto result = std::async(std::launch::async, [fn] { return error_of(fn); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << "still blocked after 10 s";
  }
  return result.get();
}

TEST(RegularFile, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_within_seconds([&] { MappedFile::open(fifo); }),
              HasSubstr("model.gguf: expected a regular file, found a FIFO (named pipe)"));
  EXPECT_THAT(error_within_seconds([&] { GgufFile::open(fifo); }), HasSubstr("found a FIFO"));
  EXPECT_THAT(error_within_seconds([&] { read_regular_file(fifo, 100); }), HasSubstr("found a FIFO"));
  // A FIFO in a model directory, as config.json.
  const std::string model_dir = dir.file("model");
  std::filesystem::create_directories(model_dir);
  ASSERT_EQ(::mkfifo((model_dir + "/config.json").c_str(), 0600), 0);
  EXPECT_THAT(error_within_seconds([&] { SafetensorsDir::open(model_dir); }),
              HasSubstr("config.json: expected a regular file, found a FIFO (named pipe)"));
}

TEST(RegularFile, DevicesAndDirectoriesAreRefused) {
  EXPECT_THAT(error_of([] { MappedFile::open("/dev/zero"); }),
              HasSubstr("/dev/zero: expected a regular file, found a character device"));
  EXPECT_THAT(error_of([] { read_regular_file("/dev/urandom", 100); }), HasSubstr("found a character device"));
  TempDir dir;
  EXPECT_THAT(error_of([&] { MappedFile::open(dir.path().string()); }),
              HasSubstr("expected a regular file, found a directory"));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(dir.path().string()); }), HasSubstr("found a directory"));
}

TEST(RegularFile, ReadsAreBoundedBySizeAndCap) {
  TempDir dir;
  { std::ofstream(dir.file("a.json")) << "{\"k\": 1}"; }
  EXPECT_EQ(read_regular_file(dir.file("a.json"), 100), "{\"k\": 1}");
  EXPECT_THAT(error_of([&] { read_regular_file(dir.file("a.json"), 4); }),
              HasSubstr("a.json: expected at most 4 bytes, found 8"));
  EXPECT_FALSE(read_regular_file_if_present(dir.file("absent.json"), 100).has_value());
  EXPECT_THAT(error_of([&] { read_regular_file(dir.file("absent.json"), 100); }),
              HasSubstr("absent.json: cannot open: No such file or directory"));
  // A symbolic link to a regular file is the file.
  std::filesystem::create_symlink(dir.file("a.json"), dir.file("link.json"));
  EXPECT_EQ(read_regular_file(dir.file("link.json"), 100), "{\"k\": 1}");
}

TEST(RegularFile, ConfigJsonIsBoundedInNesting) {
  TempDir dir;
  { std::ofstream(dir.file("config.json")) << std::string(100000, '[') << std::string(100000, ']'); }
  EXPECT_THAT(error_of([&] { SafetensorsDir::open(dir.path().string()); }),
              HasSubstr("config.json: expected arrays/objects nested at most 128 deep, found 100000"));
}

// GGUF: a zero dim is refused at parse (a [.., 0] view divided by zero in
// Tensor::nbytes: SIGFPE), and so is a shape whose zero hides an overflow.
TEST(HostileTensorDims, GgufZeroDimIsRefused) {
  auto one_tensor = [](std::vector<uint64_t> ne) {
    std::vector<uint8_t> b;
    auto put = [&](auto v) {
      size_t at = b.size();
      b.resize(at + sizeof(v));
      std::memcpy(b.data() + at, &v, sizeof(v));
    };
    put(uint32_t(0x46554747)), put(uint32_t(3)), put(uint64_t(1)), put(uint64_t(0));
    put(uint64_t(1)), b.push_back('t');
    put(uint32_t(ne.size()));
    for (uint64_t n : ne) put(n);
    put(uint32_t(0)), put(uint64_t(0));
    b.resize((b.size() + 31) / 32 * 32 + 64, 0);
    return b;
  };
  for (auto ne :
       std::vector<std::vector<uint64_t>>{{0}, {4, 0}, {0, 4}, {4, 0, uint64_t(1) << 40, uint64_t(1) << 40}}) {
    auto bytes = one_tensor(ne);
    EXPECT_THAT(error_of([&] { GgufFile::parse(bytes.data(), bytes.size(), "zero.gguf"); }),
                HasSubstr("expected a size in 1..2^63-1, found 0"));
  }
}

// safetensors: empty tensors are legal in the format (raw() serves them), but
// no tensor view has an innermost dim of 0, and zeros must not hide a stride
// overflow ([0, 2^40, 2^40] has no bytes, yet its strides would wrap).
TEST(HostileTensorDims, SafetensorsZeroDims) {
  auto file = [](const std::string& header) {
    std::string h = header;
    while (h.size() % 8 != 0) h += ' ';
    std::vector<uint8_t> bytes(8 + h.size());
    uint64_t n = h.size();
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, h.data(), h.size());
    return bytes;
  };
  auto empty = file(R"({"e":{"dtype":"F32","shape":[4,0],"data_offsets":[0,0]}})");
  auto st = SafetensorsFile::parse(empty.data(), empty.size(), "zero.safetensors");
  EXPECT_EQ(st->raw("e").nbytes, 0u);
  EXPECT_THAT(error_of([&] { st->tensor("e"); }),
              HasSubstr("tensor 'e' expected an innermost dim of at least 1 for a tensor view, found shape [4,0]"));
  auto wide = file(R"({"w":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})");
  EXPECT_THAT(error_of([&] { SafetensorsFile::parse(wide.data(), wide.size(), "wide.safetensors"); }),
              HasSubstr("expected the byte size with zero dims read as 1 below 2^63"));
}

}  // namespace
}  // namespace brioche::formats
