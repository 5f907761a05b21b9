// Where the tokenizer meets the model at load (engine/model_tokenizer.cpp):
// a tokenizer larger than the model, or a model far larger than its
// tokenizer, is refused with one line; padding loads. tokenizer.json is read
// as a bounded regular file (a FIFO in its place must not hang).
#include <sys/stat.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/model_tokenizer.h"
#include "model/hostile_model_files.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace brioche::engine {
namespace {

using ::testing::HasSubstr;

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("brioche_model_tokenizer_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a brioche::Error, none was thrown";
  return "";
}

// The tiny GGUF llama of `rows` embedding rows with a tokenizer of `tokens` ids.
std::unique_ptr<model::Model> tiny_model(const TempDir& dir, int rows, int tokens) {
  const std::string path = (dir.path / "model.gguf").string();
  model::testing::TinyGguf::llama({.vocab = rows}, tokens).write(path);
  return model::Model::load(path);
}

TEST(ModelTokenizer, EqualSizesLoad) {
  TempDir dir;
  auto m = tiny_model(dir, 64, 64);
  EXPECT_EQ(load_model_tokenizer(*m)->vocab_size(), 64);
}

TEST(ModelTokenizer, TokenizerLargerThanTheModelIsRefused) {
  TempDir dir;
  auto m = tiny_model(dir, 64, 80);
  std::string error = error_of([&] { load_model_tokenizer(*m); });
  EXPECT_THAT(error, HasSubstr("model.gguf: tokenizer vocabulary: expected at most 64 ids"));
  EXPECT_THAT(error, HasSubstr("found 80"));
}

TEST(ModelTokenizer, PaddedModelLoads) {
  TempDir dir;
  auto m = tiny_model(dir, 64, 60);
  EXPECT_EQ(load_model_tokenizer(*m)->vocab_size(), 60);
}

TEST(ModelTokenizer, PaddingBeyondTheBoundIsRefused) {
  TempDir dir;
  auto m = tiny_model(dir, 2048, 64);
  EXPECT_THAT(error_of([&] { load_model_tokenizer(*m); }),
              HasSubstr("model vocabulary: expected the embedding's 2048 rows to exceed the tokenizer's 64 ids by "
                        "padding of at most 1024 rows, found 1984"));
}

TEST(ModelTokenizer, RealModelsPaddingIsAccepted) {
  EXPECT_NO_THROW(check_tokenizer_fits_model(151665, 152064, "qwen2.5-7b"));    // pads 399
  EXPECT_NO_THROW(check_tokenizer_fits_model(151665, 151936, "qwen2.5-0.5b"));  // pads 271
  EXPECT_NO_THROW(check_tokenizer_fits_model(32011, 32064, "phi-3-mini"));      // pads 53
  EXPECT_NO_THROW(check_tokenizer_fits_model(100015, 102400, "deepseek-v2"));   // pads 2385
  EXPECT_NO_THROW(check_tokenizer_fits_model(49152, 49152, "smollm2"));
  // The report that started this: rows 76660 and more with a 49152-id tokenizer.
  EXPECT_THAT(error_of([] { check_tokenizer_fits_model(49152, 80000, "m"); }), HasSubstr("found 30848 untrained rows"));
  EXPECT_THAT(error_of([] { check_tokenizer_fits_model(49153, 49152, "m"); }),
              HasSubstr("m: tokenizer vocabulary: expected at most 49152 ids"));
}

TEST(ModelTokenizer, TokenizerJsonThatIsAFifoIsRefusedNotWaitedOn) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir.path / "tokenizer.json").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { load_model_tokenizer(nullptr, dir.path.string()); }),
              HasSubstr("tokenizer.json: expected a regular file, found a FIFO (named pipe)"));
}

TEST(ModelTokenizer, MissingTokenizerJsonIsNamed) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { load_model_tokenizer(nullptr, dir.path.string()); }),
              HasSubstr("tokenizer.json next to the model's weights"));
}

}  // namespace
}  // namespace brioche::engine
