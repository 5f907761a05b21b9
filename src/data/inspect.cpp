#include "data/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "data/curate.h"

namespace brioche::data {

json distribution(std::vector<double> v) {
  if (v.empty()) return json::object();
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto rank = [&](double p) { return v[size_t(std::max(1.0, std::ceil(p * double(v.size())))) - 1]; };
  return {{"n", v.size()},    {"min", v.front()}, {"mean", sum / double(v.size())},
          {"p50", rank(0.5)}, {"p90", rank(0.9)}, {"p99", rank(0.99)},
          {"max", v.back()}};
}

json length_histogram(const std::vector<int64_t>& lengths) {
  json bins = json::array();
  if (lengths.empty()) return bins;
  const auto [lo_it, hi_it] = std::minmax_element(lengths.begin(), lengths.end());
  int64_t from = 8;
  while (from * 2 <= *lo_it) from *= 2;
  if (*lo_it < 8) from = 0;
  while (true) {
    const int64_t to = from == 0 ? 8 : from * 2;
    int64_t n = 0;
    for (int64_t x : lengths) n += x >= from && x < to;
    bins.push_back({{"from", from}, {"to", to}, {"rows", n}});
    if (*hi_it < to) break;
    from = to;
  }
  return bins;
}

json inspect(const std::string& path, const InspectOptions& o) {
  RowReport report;
  json layouts = json::object();
  std::vector<double> prompt_chars, reply_chars, replies_per_row, scores;
  std::vector<int64_t> tokens;
  int64_t unrated = 0;
  const std::optional<RowKind> kind = read_examples(path, o.read, report, [&](const RowLocation& at, Example& ex) {
    layouts[layout_name(ex.layout)] = layouts.value(layout_name(ex.layout), int64_t(0)) + 1;
    if (ex.layout == Layout::Text) {
      reply_chars.push_back(double(utf8_length(ex.text)));
    } else {
      int64_t p = 0;
      for (const json& m : ex.prompt)
        if (m.contains("content") && m["content"].is_string()) p += utf8_length(m["content"].get<std::string>());
      prompt_chars.push_back(double(p));
      for (const Reply& r : ex.replies) {
        reply_chars.push_back(double(utf8_length(r.content())));
        if (r.score)
          scores.push_back(*r.score);
        else if (row_kind(ex.layout) == RowKind::Rated)
          ++unrated;
      }
      replies_per_row.push_back(double(ex.replies.size()));
    }
    if (o.counter) tokens.push_back(example_tokens(*o.counter, ex));
    report.keep();
  });
  json s = report.to_json();
  s.erase("kept");
  s["readable"] = report.kept();
  s["file"] = path;
  s["kind"] = kind ? row_kind_name(*kind) : "none";
  s["layouts"] = layouts;
  s["prompt_chars"] = distribution(prompt_chars);
  s["reply_chars"] = distribution(reply_chars);
  if (kind == RowKind::Rated) {
    s["replies_per_row"] = distribution(replies_per_row);
    s["unrated_completions"] = unrated;
  }
  if (!scores.empty()) s["scores"] = distribution(scores);
  if (o.counter) {
    std::vector<double> as_double(tokens.begin(), tokens.end());
    json t = distribution(as_double);
    t["tokenizer"] = o.counter->description();
    t["histogram"] = length_histogram(tokens);
    json over = json::object();
    for (int64_t limit : o.limits)
      over[std::to_string(limit)] = std::count_if(tokens.begin(), tokens.end(), [&](int64_t x) { return x > limit; });
    t["over"] = over;
    s["tokens"] = t;
  }
  return s;
}

namespace {

std::string number(double x) {
  char buf[32];
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else
    std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::string dist_line(const char* name, const json& d) {
  if (d.empty()) return "";
  return std::string(name) + ": mean " + number(d["mean"]) + ", min " + number(d["min"]) + ", p50 " + number(d["p50"]) +
         ", p90 " + number(d["p90"]) + ", p99 " + number(d["p99"]) + ", max " + number(d["max"]) + "\n";
}

}  // namespace

std::string inspect_text(const json& s) {
  std::string out = "file: " + s["file"].get<std::string>() + "\n";
  out += "kind: " + s["kind"].get<std::string>() + "; layouts:";
  for (const auto& [name, n] : s["layouts"].items()) out += " " + name + " " + n.dump();
  out += "\nrows: " + s["rows"].dump() + " (" + s["readable"].dump() + " readable, " +
         std::to_string(s["rows"].get<int64_t>() - s["readable"].get<int64_t>()) + " bad)\n";
  constexpr size_t kListed = 20;
  for (size_t i = 0; i < s["bad_rows"].size(); ++i) {
    if (i == kListed) {
      out += "  ... (" + std::to_string(s["bad_rows"].size() - kListed) + " more: --json lists them all)\n";
      break;
    }
    const json& b = s["bad_rows"][i];
    const bool item = b.contains("item");
    out += "  " + std::string(item ? "item " : "line ") + b[item ? "item" : "line"].dump() + ": " +
           b["reason"].get<std::string>() + ": " + b["message"].get<std::string>() + "\n";
  }
  out += dist_line("prompt characters", s["prompt_chars"]);
  out += dist_line("reply characters", s["reply_chars"]);
  if (s.contains("replies_per_row")) {
    out += dist_line("completions per row", s["replies_per_row"]);
    out += "unrated completions: " + s["unrated_completions"].dump() + "\n";
  }
  if (s.contains("scores")) out += dist_line("scores", s["scores"]);
  if (s.contains("tokens")) {
    const json& t = s["tokens"];
    out += "tokens (prompt + longest reply, " + t["tokenizer"].get<std::string>() + ")\n";
    out += "  " + dist_line("per row", t);
    int64_t peak = 1;
    for (const json& b : t["histogram"]) peak = std::max(peak, b["rows"].get<int64_t>());
    for (const json& b : t["histogram"]) {
      char label[64];
      std::snprintf(label, sizeof label, "  [%6lld, %6lld) %7lld ", (long long)b["from"].get<int64_t>(),
                    (long long)b["to"].get<int64_t>(), (long long)b["rows"].get<int64_t>());
      out += label + std::string(size_t(40 * b["rows"].get<int64_t>() / peak), '#') + "\n";
    }
    out += "  rows over:";
    for (const auto& [limit, n] : t["over"].items()) out += " " + limit + ": " + n.dump() + ";";
    out.back() = '\n';
  }
  return out;
}

}  // namespace brioche::data
