#include "server/output_parser.h"

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

namespace brioche::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = kHermesFormat.call_open;
constexpr std::string_view kToolClose = kHermesFormat.call_close;
constexpr std::string_view kPythonTag = kLlama3JsonFormat.python_tag;

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  size_t max = std::min(text.size(), marker.size() - 1);
  for (size_t n = max; n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

bool all_space(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

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

OutputParser::OutputParser(OutputParserOptions options)
    : options_(options),
      mode_(options.starts_in_reasoning && options.split_reasoning ? Mode::Reasoning : Mode::Start) {}

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

void merge_tool_call_pieces(std::vector<ToolCallDelta>& into, std::vector<ToolCallDelta> more) {
  for (ToolCallDelta& piece : more) {
    if (!into.empty() && into.back().index == piece.index && piece.id.empty()) {
      into.back().arguments += piece.arguments;
    } else {
      into.push_back(std::move(piece));
    }
  }
}

void OutputParser::take_calls(std::vector<ToolCallDelta> pieces, ParsedDelta& out) {
  merge_tool_call_pieces(out.tool_calls, std::move(pieces));
  if (scanner_) n_tool_calls_ = std::max(n_tool_calls_, scanner_first_ + scanner_->calls_announced());
}

void append_tool_call_pieces(std::vector<ParsedToolCall>& calls, const std::vector<ToolCallDelta>& pieces) {
  for (const ToolCallDelta& piece : pieces) {
    if (!piece.id.empty()) {
      calls.push_back({.id = piece.id, .name = piece.name, .arguments = piece.arguments});
      continue;
    }
    if (piece.index >= 0 && size_t(piece.index) < calls.size()) calls[size_t(piece.index)].arguments += piece.arguments;
  }
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
          if (at_end) {
            pending_.clear();
            return;
          }
          return;
        }
        std::string_view rest = std::string_view(pending_).substr(lead);
        auto could_be = [&](std::string_view marker) {
          return rest.size() < marker.size() ? marker.substr(0, rest.size()) == rest
                                             : rest.substr(0, marker.size()) == marker;
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
            scanner_first_ = n_tool_calls_;
            scanner_.emplace(n_tool_calls_);
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
            scanner_first_ = n_tool_calls_;
            scanner_.emplace(n_tool_calls_);
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
        // The call body goes to the scanner as it arrives, except a tail
        // that may be the start of </tool_call>.
        size_t close = pending_.find(kToolClose);
        size_t body_end = close != std::string::npos ? close
                          : at_end                   ? pending_.size()
                                                     : pending_.size() - partial_marker_suffix(pending_, kToolClose);
        take_calls(scanner_->feed(std::string_view(pending_).substr(0, body_end)), out);
        pending_.erase(0, body_end);
        if (close == std::string::npos && !at_end) return;
        take_calls(scanner_->finish(), out);
        if (scanner_->not_a_call()) {
          out.content +=
              std::string(kToolOpen) + scanner_->text() + (close == std::string::npos ? "" : std::string(kToolClose));
          content_started_ = true;
          after_tool_call_ = false;
        } else {
          after_tool_call_ = true;
          // Text after the call object inside the tags: stray closing
          // brackets are dropped, anything else is content.
          std::string_view rest =
              std::string_view(scanner_->text()).substr(std::min(scanner_->end_offset(), scanner_->text().size()));
          if (rest.find_first_not_of(" \t\r\n}]") != std::string_view::npos) {
            out.content += std::string(trim(rest));
            content_started_ = true;
            after_tool_call_ = false;
          }
        }
        scanner_.reset();
        if (close != std::string::npos) pending_.erase(0, kToolClose.size());
        mode_ = Mode::Content;
        if (at_end && pending_.empty()) return;
        continue;
      }
      case Mode::JsonCall: {
        // The output is the call list: everything goes to the scanner.
        take_calls(scanner_->feed(pending_), out);
        pending_.clear();
        if (at_end) take_calls(scanner_->finish(), out);
        if (scanner_->not_a_call()) {
          pending_ = scanner_->text();  // plain JSON (or text) after all: content
        } else if (scanner_->list_ended()) {
          pending_ = std::string(trim(
              std::string_view(scanner_->text()).substr(std::min(scanner_->end_offset(), scanner_->text().size()))));
          after_tool_call_ = true;
        } else {
          return;
        }
        scanner_.reset();
        mode_ = Mode::Content;
        if (pending_.empty()) return;
        continue;
      }
    }
  }
}

}  // namespace brioche::server
