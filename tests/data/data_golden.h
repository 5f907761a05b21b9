// Fixtures and goldens of tests/data (tools/oracle/data_goldens.py writes the goldens).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "data/row_report.h"

namespace brioche::data {

inline std::string fixture(const std::string& name) {
  return std::string(BRIOCHE_SOURCE_DIR) + "/tests/data/fixtures/" + name;
}

inline json golden(const std::string& name) {
  std::ifstream in(std::string(BRIOCHE_SOURCE_DIR) + "/tests/data/golden/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

// The golden's {rows, kept, dropped, dropped_at} against the report's (same keys; messages are ours alone).
inline void expect_report(const RowReport& report, const json& want) {
  json got = report.to_json();
  EXPECT_EQ(got["rows"], want["rows"]);
  EXPECT_EQ(got["kept"], want["kept"]);
  // Key order aside (ordered_json compares in order; nlohmann::json as maps).
  auto unordered = [](const json& j) { return nlohmann::json::parse(j.dump()); };
  EXPECT_EQ(unordered(got["dropped"]), unordered(want["dropped"]))
      << got["dropped"].dump() << " vs " << want["dropped"].dump();
  EXPECT_EQ(unordered(got["dropped_at"]), unordered(want["dropped_at"]));
}

}  // namespace brioche::data
