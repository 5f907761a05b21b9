// The adapter registry's rules without a model: names, the --lora-dir
// boundary, LRU residency and what a running request keeps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "server/adapter_registry.h"
#include "server/api_error.h"

namespace brioche::server {
namespace {

namespace fs = std::filesystem;

// A reader that "reads" any folder with an adapter_config.json as a rank-4 adapter.
std::shared_ptr<model::ServedAdapter> fake_read(const std::string& dir, int max_rank) {
  BRIOCHE_CHECK(fs::exists(fs::path(dir) / "adapter_config.json") || fs::path(dir).extension() == ".gguf", dir,
                ": not an adapter");
  BRIOCHE_CHECK(4 <= max_rank, dir, ": rank 4 above ", max_rank);
  auto a = std::make_shared<model::ServedAdapter>();
  a->rank = 4;
  return a;
}

struct LoraDir {
  // One folder per test: ctest runs the tests of this file as parallel processes.
  fs::path root =
      fs::path(BRIOCHE_BINARY_DIR) /
      ("adapter_registry_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  LoraDir() {
    fs::remove_all(root);
    for (const char* name : {"a", "b", "c"}) {
      fs::create_directories(root / "adapters" / name);
      std::ofstream(root / "adapters" / name / "adapter_config.json") << "{}";
    }
    std::ofstream(root / "adapters" / "g.gguf") << "x";
    fs::create_directories(root / "outside");
    std::ofstream(root / "outside" / "adapter_config.json") << "{}";
    fs::create_directory_symlink(root / "outside", root / "adapters" / "escape");
  }
  AdapterOptions options(int max_resident = 2) const {
    return {.lora_dir = (root / "adapters").string(),
            .allow_runtime = true,
            .max_resident = max_resident,
            .read = fake_read};
  }
};

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

TEST(AdapterRegistry, ServesTheFoldersAndGgufFilesOfLoraDir) {
  LoraDir d;
  AdapterRegistry r(d.options(8), Device::CPU, "base");
  std::vector<std::string> names;
  for (const AdapterInfo& a : r.list()) names.push_back(a.name);
  // The operator's link to an adapter elsewhere is served; a runtime load of it is not (below).
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "escape", "g"}));
  EXPECT_NE(r.acquire("a"), nullptr);
  EXPECT_EQ(r.acquire("base"), nullptr);
  EXPECT_EQ(r.acquire("nope"), nullptr);
}

TEST(AdapterRegistry, KeepsAtMostMaxResidentOnTheDeviceLeastRecentlyUsedOut) {
  LoraDir d;
  AdapterRegistry r(d.options(2), Device::CPU, "base");
  r.unload("escape");
  auto resident = [&] {
    std::vector<std::string> out;
    for (const AdapterInfo& a : r.list())
      if (a.resident) out.push_back(a.name);
    return out;
  };
  EXPECT_LE(resident().size(), 2u);
  r.acquire("a");
  r.acquire("b");
  EXPECT_EQ(resident(), (std::vector<std::string>{"a", "b"}));
  std::shared_ptr<const model::ServedAdapter> held = r.acquire("a");  // a is now the most recent
  r.acquire("c");                                                     // evicts b
  EXPECT_EQ(resident(), (std::vector<std::string>{"a", "c"}));
  r.acquire("g");  // evicts a; the request holding it keeps its factors
  EXPECT_EQ(resident(), (std::vector<std::string>{"c", "g"}));
  EXPECT_EQ(held->rank, 4);
  EXPECT_NE(r.acquire("a"), nullptr);  // back on the device
}

TEST(AdapterRegistry, RuntimeLoadsStayInsideLoraDir) {
  LoraDir d;
  AdapterRegistry r(d.options(), Device::CPU, "base");
  EXPECT_EQ(status_of([&] { r.load("escape2", (d.root / "adapters" / "escape").string()); }), 403);
  EXPECT_EQ(status_of([&] { r.load("out", (d.root / "outside").string()); }), 403);
  EXPECT_EQ(status_of([&] { r.load("dots", "../outside"); }), 403);
  EXPECT_EQ(status_of([&] { r.load("root", (d.root / "adapters").string()); }), 403);
  EXPECT_EQ(status_of([&] { r.load("missing", "zzz"); }), 400);
  EXPECT_EQ(status_of([&] { r.load("a", "b"); }), 409);
  EXPECT_EQ(status_of([&] { r.load("base", "b"); }), 400);
  EXPECT_EQ(status_of([&] { r.load("has space", "b"); }), 400);
  EXPECT_EQ(status_of([&] { r.load("b2", "b"); }), 200);  // relative to --lora-dir
  EXPECT_EQ(status_of([&] { r.unload("b2"); }), 200);
  EXPECT_EQ(status_of([&] { r.unload("b2"); }), 404);
}

// Download offers an adapter's own plain files only: no folders, links or
// odd names, and nothing by any other name.
TEST(AdapterFiles, OnlyTheAdaptersOwnPlainFiles) {
  LoraDir d;
  const fs::path a = d.root / "adapters" / "a";
  std::ofstream(a / "adapter_model.safetensors") << "0123456789";
  std::ofstream(a / "bad name\r\n.txt") << "x";
  std::ofstream(a / ".hidden") << "x";
  fs::create_directories(a / "checkpoints");
  fs::create_symlink(d.root / "outside" / "adapter_config.json", a / "linked.json");
  std::vector<std::string> names;
  for (const AdapterFile& f : adapter_files(a.string())) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  EXPECT_EQ(read_adapter_file(a.string(), "adapter_model.safetensors", 100), "0123456789");
  EXPECT_EQ(status_of([&] { read_adapter_file(a.string(), "adapter_model.safetensors", 9); }), 413);
  for (const char* bad : {"linked.json", "checkpoints", ".hidden", "../b/adapter_config.json", "", "nothing"})
    EXPECT_EQ(status_of([&] { read_adapter_file(a.string(), bad, 100); }), 404) << bad;
  const fs::path g = d.root / "adapters" / "g.gguf";  // a GGUF LoRA is its one file
  ASSERT_EQ(adapter_files(g.string()).size(), 1u);
  EXPECT_EQ(read_adapter_file(g.string(), "g.gguf", 100), "x");
}

TEST(AdapterRegistry, RuntimeLoadingNeedsLoraDir) {
  EXPECT_THROW(AdapterRegistry({.allow_runtime = true, .read = fake_read}, Device::CPU, "base"), Error);
  AdapterRegistry none({}, Device::CPU, "base");
  EXPECT_EQ(status_of([&] { none.load("x", "/tmp"); }), 403);
}

}  // namespace
}  // namespace brioche::server
