#include "data/layout.h"

#include <array>
#include <utility>

namespace brioche::data {

namespace {

constexpr std::array<std::pair<Layout, const char*>, 10> kNames = {{
    {Layout::Preference, "preference"},
    {Layout::TrlConversational, "trl-conversational"},
    {Layout::HhRlhf, "hh-rlhf"},
    {Layout::UltraFeedback, "ultrafeedback"},
    {Layout::UltraFeedbackBinarized, "ultrafeedback-binarized"},
    {Layout::Chat, "chat"},
    {Layout::ShareGpt, "sharegpt"},
    {Layout::Alpaca, "alpaca"},
    {Layout::Completion, "completion"},
    {Layout::Text, "text"},
}};

}  // namespace

std::string layout_name(Layout layout) {
  for (const auto& [l, name] : kNames)
    if (l == layout) return name;
  return "?";
}

std::optional<Layout> parse_layout(const std::string& name) {
  for (const auto& [l, n] : kNames)
    if (name == n) return l;
  return std::nullopt;
}

std::string layout_names() {
  std::string out;
  for (const auto& [l, name] : kNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

RowKind row_kind(Layout layout) {
  switch (layout) {
    case Layout::Preference:
    case Layout::TrlConversational:
    case Layout::HhRlhf:
    case Layout::UltraFeedbackBinarized:  // one pair, with its scores
      return RowKind::Preference;
    case Layout::UltraFeedback: return RowKind::Rated;
    default: return RowKind::Sft;
  }
}

std::string row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::Preference: return "preference pairs";
    case RowKind::Sft: return "sft examples";
    case RowKind::Rated: return "rated completions";
  }
  return "?";
}

std::optional<Layout> detect_layout(const nlohmann::ordered_json& row) {
  if (!row.is_object()) return std::nullopt;
  auto has = [&](const char* key) { return row.contains(key); };
  if (has("completions")) return Layout::UltraFeedback;
  if (has("conversations")) return Layout::ShareGpt;
  if (has("chosen") || has("rejected")) {
    if (has("score_chosen") || has("score_rejected")) return Layout::UltraFeedbackBinarized;
    auto is_list = [&](const char* key) { return has(key) && row[key].is_array(); };
    if (is_list("chosen") || is_list("rejected") || is_list("prompt")) return Layout::TrlConversational;
    if (!has("prompt")) return Layout::HhRlhf;
    return Layout::Preference;
  }
  if (has("messages")) return Layout::Chat;
  if (has("instruction") && has("output")) return Layout::Alpaca;
  if (has("prompt") && has("completion")) return Layout::Completion;
  if (has("text")) return Layout::Text;
  return std::nullopt;
}

std::string key_list(const nlohmann::ordered_json& row) {
  if (!row.is_object()) return std::string("a JSON ") + row.type_name() + ", not an object";
  std::string out = "keys [";
  bool first = true;
  for (const auto& [key, value] : row.items()) {
    out += (first ? "" : ", ") + key;
    first = false;
  }
  return out + "]";
}

}  // namespace brioche::data
