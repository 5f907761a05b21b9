// find_static_file: only regular files inside the resolved web root.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "server/static_files.h"

namespace brioche::server {
namespace {
namespace fs = std::filesystem;

class StaticFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("brioche-static-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "web" / "sub");
    std::ofstream(dir_ / "web" / "index.html") << "<p>hi</p>";
    std::ofstream(dir_ / "web" / "sub" / "app.js") << "1";
    std::ofstream(dir_ / "secret.txt") << "key";
    fs::create_symlink(dir_ / "secret.txt", dir_ / "web" / "out-link");
    fs::create_symlink("/dev/zero", dir_ / "web" / "zero");
    fs::create_symlink("sub/app.js", dir_ / "web" / "in-link.js");
    ASSERT_EQ(::mkfifo((dir_ / "web" / "fifo").c_str(), 0600), 0);
    root_ = resolve_web_root((dir_ / "web").string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, root_;
};

TEST_F(StaticFilesTest, ServesRegularFilesInside) {
  auto index = find_static_file(root_, "/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->path, root_ / "index.html");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  ASSERT_TRUE(find_static_file(root_, "/sub/app.js"));
  ASSERT_TRUE(find_static_file(root_, "/sub/../index.html"));
  auto link = find_static_file(root_, "/in-link.js");
  ASSERT_TRUE(link);
  EXPECT_EQ(link->path, root_ / "sub" / "app.js");
}

TEST_F(StaticFilesTest, NothingOutsideOrIrregular) {
  for (const char* path :
       {"//etc/passwd", "//proc/self/cmdline", "/../secret.txt", "/sub/../../secret.txt", "/out-link", "/zero", "/fifo",
        "/sub", "/sub/", "/missing", "", "index.html", "/%2e%2e/secret.txt"})
    EXPECT_FALSE(find_static_file(root_, path)) << path;
}

TEST_F(StaticFilesTest, RootMustBeADirectory) {
  EXPECT_THROW(resolve_web_root((dir_ / "secret.txt").string()), Error);
  EXPECT_THROW(resolve_web_root((dir_ / "nope").string()), Error);
}

}  // namespace
}  // namespace brioche::server
