#include "data/train_rows.h"

namespace brioche::data {

namespace {

bool is_single_user_message(const json& prompt) {
  if (!prompt.is_array() || prompt.size() != 1) return false;
  const json& m = prompt[0];
  return m.size() == 2 && m.value("role", "") == "user" && m.contains("content") && m["content"].is_string();
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

json prompt_field(const json& prompt) {
  if (is_single_user_message(prompt)) return prompt[0]["content"];
  return prompt;
}

json preference_row(const json& prompt, const Reply& chosen, const Reply& rejected) {
  return {{"prompt", prompt_field(prompt)}, {"chosen", chosen.content()}, {"rejected", rejected.content()}};
}

json sft_row(const Example& ex) {
  if (ex.layout == Layout::Text) return {{"text", ex.text}};
  BRIOCHE_CHECK(ex.replies.size() == 1, "sft_row: expected one reply, found ", ex.replies.size());
  const json& reply = ex.replies[0].message;
  const bool plain_reply = reply.size() == 2 && reply.contains("content") && reply["content"].is_string();
  if (plain_reply && is_single_user_message(ex.prompt))
    return {{"prompt", ex.prompt[0]["content"]}, {"completion", reply["content"]}};
  json messages = ex.prompt;
  messages.push_back(ex.replies[0].message);
  return {{"messages", std::move(messages)}};
}

std::string prompt_key(const json& prompt) {
  json key = prompt;
  for (json& m : key)
    if (m.contains("content") && m["content"].is_string()) m["content"] = trimmed(m["content"].get<std::string>());
  return key.dump();
}

}  // namespace brioche::data
