#include "server/output_parser.h"

#include <random>

#include <nlohmann/json.hpp>

namespace brioche::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  size_t max = std::min(text.size(), marker.size() - 1);
  for (size_t n = max; n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

bool all_space(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string random_id(std::string_view prefix, int length) {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(prefix);
  for (int i = 0; i < length; ++i) id += kAlphabet[gen() % (sizeof(kAlphabet) - 1)];
  return id;
}

ToolSyntax tool_syntax_for_template(const std::string& chat_template) {
  if (chat_template.find("<tool_call>") != std::string::npos) return ToolSyntax::Hermes;
  if (chat_template.find("<|python_tag|>") != std::string::npos || chat_template.find("ipython") != std::string::npos)
    return ToolSyntax::Llama3Json;
  return ToolSyntax::Hermes;  // our fallback prompt format documents Hermes-style calls
}

OutputParser::OutputParser(OutputParserOptions options)
    : options_(options), mode_(options.starts_in_reasoning && options.split_reasoning ? Mode::Reasoning : Mode::Start) {}

ParsedDelta OutputParser::push(std::string_view text) {
  pending_.append(text);
  ParsedDelta out;
  run(out, false);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  run(out, true);
  return out;
}

bool OutputParser::parse_call_object(std::string_view json_text, ParsedDelta& out) {
  nlohmann::json v = nlohmann::json::parse(trim(json_text), nullptr, false);
  std::vector<nlohmann::json> items;
  if (v.is_object()) items.push_back(v);
  else if (v.is_array()) items.assign(v.begin(), v.end());
  else return false;
  std::vector<ParsedToolCall> calls;
  for (const nlohmann::json& item : items) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) return false;
    nlohmann::json args = item.contains("arguments") ? item["arguments"]
                          : item.contains("parameters") ? item["parameters"] : nlohmann::json::object();
    if (args.is_string()) {  // some models double-encode
      nlohmann::json inner = nlohmann::json::parse(args.get<std::string>(), nullptr, false);
      if (!inner.is_discarded()) args = inner;
    }
    calls.push_back({.id = random_id("call_"), .name = item["name"].get<std::string>(), .arguments = args.dump()});
  }
  for (auto& c : calls) out.tool_calls.push_back(std::move(c));
  n_tool_calls_ += int(calls.size());
  return true;
}

void OutputParser::run(ParsedDelta& out, bool at_end) {
  for (;;) {
    switch (mode_) {
      case Mode::Start: {
        // Decide between reasoning, a Llama-3 JSON call and plain content by
        // the first non-space characters.
        std::string_view head = trim(pending_);
        size_t lead = pending_.find_first_not_of(" \t\r\n");
        if (lead == std::string::npos) {
          if (at_end) { pending_.clear(); return; }
          return;
        }
        std::string_view rest = std::string_view(pending_).substr(lead);
        auto could_be = [&](std::string_view marker) {
          return rest.size() < marker.size() ? marker.substr(0, rest.size()) == rest : rest.substr(0, marker.size()) == marker;
        };
        if (options_.split_reasoning && could_be(kThinkOpen)) {
          if (rest.size() < kThinkOpen.size()) {
            if (!at_end) return;
          } else {
            pending_.erase(0, lead + kThinkOpen.size());
            mode_ = Mode::Reasoning;
            continue;
          }
        }
        if (options_.tools == ToolSyntax::Llama3Json && (could_be(kPythonTag) || rest[0] == '{' || rest[0] == '[')) {
          if (rest.size() < kPythonTag.size() && rest[0] == '<' && !at_end) return;
          if (rest[0] != '<' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
            if (rest[0] == '<') pending_.erase(0, lead + kPythonTag.size());
            mode_ = Mode::JsonCall;
            continue;
          }
        }
        (void)head;
        mode_ = Mode::Content;
        continue;
      }
      case Mode::Reasoning: {
        size_t close = pending_.find(kThinkClose);
        if (close != std::string::npos) {
          out.reasoning += pending_.substr(0, close);
          pending_.erase(0, close + kThinkClose.size());
          mode_ = Mode::Content;
          strip_leading_ws_ = true;
          continue;
        }
        size_t keep = at_end ? 0 : partial_marker_suffix(pending_, kThinkClose);
        out.reasoning += pending_.substr(0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case Mode::Content: {
        if (strip_leading_ws_) {
          size_t lead = pending_.find_first_not_of(" \t\r\n");
          if (lead == std::string::npos) {
            pending_.clear();
            return;
          }
          pending_.erase(0, lead);
          strip_leading_ws_ = false;
        }
        // Whitespace around tool calls is layout: dropped before the first
        // call (when no text came yet), between calls and after the last one.
        bool layout_ws = !content_started_ || after_tool_call_;
        if (options_.tools == ToolSyntax::Hermes) {
          size_t open = pending_.find(kToolOpen);
          if (open != std::string::npos) {
            std::string before = pending_.substr(0, open);
            if (!(all_space(before) && layout_ws)) {
              out.content += before;
              if (!all_space(before)) content_started_ = true;
            }
            pending_.erase(0, open + kToolOpen.size());
            mode_ = Mode::HermesCall;
            continue;
          }
        }
        size_t keep = 0;
        if (!at_end && options_.tools == ToolSyntax::Hermes) keep = partial_marker_suffix(pending_, kToolOpen);
        std::string emit = pending_.substr(0, pending_.size() - keep);
        if (options_.tools == ToolSyntax::Hermes && all_space(emit)) {
          if (at_end && layout_ws) pending_.clear();
          return;  // whitespace waits: a tool call may follow
        }
        if (options_.tools == ToolSyntax::Hermes && !at_end) {
          // Trailing whitespace also waits, so it can be dropped before a call.
          size_t last = emit.find_last_not_of(" \t\r\n");
          emit.resize(last + 1);
        }
        pending_.erase(0, emit.size());
        if (!all_space(emit)) {
          content_started_ = true;
          after_tool_call_ = false;
        }
        out.content += emit;
        return;
      }
      case Mode::HermesCall: {
        size_t close = pending_.find(kToolClose);
        if (close == std::string::npos && !at_end) return;
        std::string body = close == std::string::npos ? pending_ : pending_.substr(0, close);
        if (parse_call_object(body, out)) {
          after_tool_call_ = true;
        } else {
          out.content += std::string(kToolOpen) + body + (close == std::string::npos ? "" : std::string(kToolClose));
          content_started_ = true;
          after_tool_call_ = false;
        }
        pending_.erase(0, close == std::string::npos ? pending_.size() : close + kToolClose.size());
        mode_ = Mode::Content;
        if (at_end && pending_.empty()) return;
        continue;
      }
      case Mode::JsonCall: {
        if (!at_end) return;  // a JSON call is the whole output
        std::string body = pending_;
        pending_.clear();
        bool ok = true;
        int count_before = n_tool_calls_;
        ParsedDelta calls;
        size_t start = 0;
        // Several calls may be joined by ';'.
        while (ok && start < body.size()) {
          size_t semi = body.find(';', start);
          std::string_view piece = std::string_view(body).substr(start, semi == std::string::npos ? std::string::npos : semi - start);
          if (!all_space(piece)) ok = parse_call_object(piece, calls);
          if (semi == std::string::npos) break;
          start = semi + 1;
        }
        if (!ok) {
          // Not separable by ';' (a ';' inside a string): try the whole text.
          n_tool_calls_ = count_before;
          calls = {};
          ok = parse_call_object(body, calls);
        }
        if (ok) {
          for (auto& c : calls.tool_calls) out.tool_calls.push_back(std::move(c));
        } else {
          out.content += body;
        }
        return;
      }
    }
  }
}

}  // namespace brioche::server
