#include "data/row_report.h"

namespace brioche::data {

bool is_bad_row_reason(const std::string& reason) {
  return reason == "invalid_json" || reason == "bad_row" || reason == "other_kind";
}

void RowReport::drop(DroppedRow row) {
  ++rows_;
  bool found = false;
  for (auto& [reason, n] : counts_)
    if (reason == row.reason) ++n, found = true;
  if (!found) counts_.emplace_back(row.reason, 1);
  dropped_.push_back(std::move(row));
}

int64_t RowReport::count(const std::string& reason) const {
  for (const auto& [r, n] : counts_)
    if (r == reason) return n;
  return 0;
}

int64_t RowReport::bad_rows() const {
  int64_t n = 0;
  for (const auto& [r, c] : counts_)
    if (is_bad_row_reason(r)) n += c;
  return n;
}

json RowReport::to_json() const {
  json dropped = json::object(), at = json::object(), bad = json::array();
  for (const auto& [r, n] : counts_) dropped[r] = n, at[r] = json::array();
  for (const DroppedRow& d : dropped_) {
    at[d.reason].push_back(d.at.number);
    if (is_bad_row_reason(d.reason))
      bad.push_back({{d.at.array_item ? "item" : "line", d.at.number}, {"reason", d.reason}, {"message", d.message}});
  }
  return {{"rows", rows_}, {"kept", kept_}, {"dropped", dropped}, {"bad_rows", bad}, {"dropped_at", at}};
}

std::string RowReport::summary(int max_listed) const {
  std::string out = "rows " + std::to_string(rows_) + ", kept " + std::to_string(kept_) + ", dropped " +
                    std::to_string(dropped()) + "\n";
  for (const auto& [r, n] : counts_) out += "  dropped " + r + ": " + std::to_string(n) + "\n";
  int listed = 0;
  for (const DroppedRow& d : dropped_) {
    if (!is_bad_row_reason(d.reason)) continue;
    if (listed++ == max_listed) {
      out += "  ... (" + std::to_string(bad_rows() - max_listed) + " more bad rows in the stats JSON)\n";
      break;
    }
    out += "  " + d.at.text() + ": " + d.reason + ": " + d.message + "\n";
  }
  return out;
}

}  // namespace brioche::data
