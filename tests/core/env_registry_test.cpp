// The environment registry: every BRIOCHE_* variable the sources read is
// declared in it, once, sorted, and reading an undeclared one is an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/env_switch.h"
#include "core/error.h"

namespace brioche {
namespace {

TEST(EnvRegistry, SortedUniqueAndDescribed) {
  std::string previous;
  for (const EnvVariable& v : env_registry()) {
    EXPECT_LT(previous, std::string(v.name)) << "registry not sorted or duplicated at " << v.name;
    EXPECT_EQ(v.name.rfind("BRIOCHE_", 0), 0u) << v.name;
    EXPECT_FALSE(v.effect.empty()) << v.name;
    previous = v.name;
  }
}

TEST(EnvRegistry, UndeclaredOrMistypedNamesAreErrors) {
  EXPECT_THROW(env_switch_on("BRIOCHE_NOT_A_SWITCH"), Error);
  EXPECT_THROW(env_flag_set("BRIOCHE_CUDA_GRAPHS"), Error);  // declared as OnUnlessZero
  EXPECT_TRUE(env_switch_on("BRIOCHE_CUDA_GRAPHS") || std::getenv("BRIOCHE_CUDA_GRAPHS"));
}

TEST(EnvRegistry, ReadsFollowTheirKind) {
  ::setenv("BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES", "3", 1);
  EXPECT_EQ(env_int("BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES", 8), 3);
  ::unsetenv("BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES");
  EXPECT_EQ(env_int("BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES", 8), 8);
  ::setenv("BRIOCHE_CUDA_PDL", "0", 1);
  EXPECT_FALSE(env_switch_on("BRIOCHE_CUDA_PDL"));
  ::unsetenv("BRIOCHE_CUDA_PDL");
  EXPECT_TRUE(env_switch_on("BRIOCHE_CUDA_PDL"));
}

// Every name read through env_* or getenv in src/ is in the registry, and
// src/ reads no BRIOCHE_* variable around it.
TEST(EnvRegistry, CoversEverySourceRead) {
  std::set<std::string> declared;
  for (const EnvVariable& v : env_registry()) declared.insert(std::string(v.name));
  const std::regex through_registry(R"(env_(?:switch_on|flag_set|int|number|text)\("(BRIOCHE_[A-Z0-9_]+)\")");
  const std::regex around_registry(R"(getenv\("(BRIOCHE_[A-Z0-9_]+)\")");
  std::set<std::string> read;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(BRIOCHE_SOURCE_DIR) + "/src")) {
    std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
    if (entry.path().filename() == "env_registry.cpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    std::string source = text.str();
    for (std::sregex_iterator it(source.begin(), source.end(), through_registry), end; it != end; ++it)
      read.insert((*it)[1]);
    for (std::sregex_iterator it(source.begin(), source.end(), around_registry), end; it != end; ++it)
      ADD_FAILURE() << entry.path() << " reads " << (*it)[1] << " with getenv; use core/env_switch.h";
  }
  for (const std::string& name : read) EXPECT_TRUE(declared.count(name)) << name << " is read but not declared";
  for (const std::string& name : declared) EXPECT_TRUE(read.count(name)) << name << " is declared but never read";
}

}  // namespace
}  // namespace brioche
