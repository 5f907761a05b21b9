#include "server/tool_call_scanner.h"

#include <nlohmann/json.hpp>

#include "server/output_parser.h"

namespace brioche::server {
namespace {

bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

}  // namespace

ToolCallScanner::ToolCallScanner(int first_index) : index_(first_index) {}

std::vector<ToolCallDelta> ToolCallScanner::feed(std::string_view text) {
  std::vector<ToolCallDelta> out;
  text_.append(text);
  while (pos_ < text_.size() && phase_ != Phase::NotACall && phase_ != Phase::ListEnd && phase_ != Phase::Broken) {
    step(text_[pos_], out);
  }
  if (phase_ == Phase::Broken) {
    release_arguments(text_.size(), out);
    pos_ = text_.size();
  } else if (args_open_ && !value_is_string_) {
    release_arguments(pos_, out);  // the arguments so far, as written
  }
  return out;
}

std::vector<ToolCallDelta> ToolCallScanner::finish() {
  std::vector<ToolCallDelta> out;
  if (phase_ == Phase::NotACall || phase_ == Phase::ListEnd || phase_ == Phase::Broken) return out;
  if (phase_ == Phase::Value && value_in_string_ == false && value_depth_ == 0 && pos_ > value_start_) {
    end_value(out);  // a scalar value ended by the end of the text
  }
  if (named_) {
    // Cut short inside a named call: it keeps what it has.
    if (args_open_) release_arguments(text_.size(), out);
    if (!has_arguments_ && phase_ == Phase::CommaOrEnd) emit({.index = index_, .arguments = "{}"}, out);
    phase_ = Phase::ListEnd;
    end_offset_ = text_.size();
    return out;
  }
  if (announced_ == 0) {
    phase_ = Phase::NotACall;
    return out;
  }
  // Calls were complete; what follows the last one (if anything) is text.
  if (phase_ == Phase::SeparatorOrEnd || phase_ == Phase::ObjectStart) {
    size_t rest = text_.find_first_not_of(" \t\r\n,;", end_offset_);
    if (rest == std::string::npos) end_offset_ = text_.size();
  } else {
    end_offset_ = object_start_;
  }
  phase_ = Phase::ListEnd;
  return out;
}

void ToolCallScanner::step(char ch, std::vector<ToolCallDelta>& out) {
  switch (phase_) {
    case Phase::ListStart:
    case Phase::ObjectStart:
      if (is_space(ch)) break;
      if (ch == '[' && phase_ == Phase::ListStart) {
        in_list_ = true;
        phase_ = Phase::ObjectStart;
        break;
      }
      if (ch == ']' && in_list_ && phase_ == Phase::ObjectStart) {
        phase_ = Phase::ListEnd;
        end_offset_ = pos_ + 1;
        break;
      }
      if (ch == '{') {
        object_start_ = pos_;
        key_.clear();
        name_.clear();
        named_ = has_arguments_ = args_open_ = false;
        held_arguments_.clear();
        phase_ = Phase::KeyOrEnd;
        break;
      }
      return fail(out);
    case Phase::KeyOrEnd:
      if (is_space(ch)) break;
      if (ch == '"') {
        key_.clear();
        key_escape_ = false;
        phase_ = Phase::Key;
        break;
      }
      if (ch == '}') {
        end_object(out);
        if (phase_ == Phase::SeparatorOrEnd) break;
        return;
      }
      return fail(out);
    case Phase::Key:
      if (key_escape_) {
        key_escape_ = false;
      } else if (ch == '\\') {
        key_escape_ = true;
      } else if (ch == '"') {
        phase_ = Phase::Colon;
        break;
      }
      key_ += ch;
      break;
    case Phase::Colon:
      if (is_space(ch)) break;
      if (ch != ':') return fail(out);
      phase_ = Phase::ValueStart;
      break;
    case Phase::ValueStart:
      if (is_space(ch)) break;
      value_start_ = pos_;
      value_depth_ = 0;
      value_in_string_ = value_escape_ = false;
      value_is_string_ = ch == '"';
      value_is_name_ = key_ == "name";
      value_is_arguments_ = (key_ == "arguments" || key_ == "parameters") && !has_arguments_;
      if (value_is_name_ && (!value_is_string_ || named_)) return fail(out);
      if (value_is_arguments_) {
        has_arguments_ = args_open_ = true;
        args_released_ = pos_;
      }
      phase_ = Phase::Value;
      return;  // the value's first character is scanned as part of it
    case Phase::Value:
      if (value_in_string_) {
        if (value_escape_) {
          value_escape_ = false;
        } else if (ch == '\\') {
          value_escape_ = true;
        } else if (ch == '"') {
          value_in_string_ = false;
          if (value_depth_ == 0) {
            ++pos_;
            return end_value(out);
          }
        }
        break;
      }
      if (ch == '"') {
        value_in_string_ = true;
      } else if (ch == '{' || ch == '[') {
        ++value_depth_;
      } else if (ch == '}' || ch == ']') {
        if (value_depth_ == 0) return end_value(out);  // a scalar ended by its object's '}'
        if (--value_depth_ == 0) {
          ++pos_;
          return end_value(out);
        }
      } else if ((ch == ',' || is_space(ch)) && value_depth_ == 0) {
        return end_value(out);  // a scalar ended
      }
      break;
    case Phase::CommaOrEnd:
      if (is_space(ch)) break;
      if (ch == ',') {
        phase_ = Phase::KeyOrEnd;
        break;
      }
      if (ch == '}') {
        end_object(out);
        if (phase_ == Phase::SeparatorOrEnd) break;
        return;
      }
      return fail(out);
    case Phase::SeparatorOrEnd:
      if (is_space(ch)) break;
      if (ch == ',' || ch == ';') {
        phase_ = Phase::ObjectStart;
        break;
      }
      if (ch == ']' && in_list_) {
        phase_ = Phase::ListEnd;
        end_offset_ = pos_ + 1;
        break;
      }
      if (ch == '{') {
        phase_ = Phase::ObjectStart;  // objects back to back
        return;
      }
      phase_ = Phase::ListEnd;  // text after the calls
      end_offset_ = pos_;
      return;
    case Phase::Broken:
    case Phase::ListEnd:
    case Phase::NotACall: return;
  }
  ++pos_;
}

void ToolCallScanner::end_value(std::vector<ToolCallDelta>& out) {
  const size_t end = pos_;
  const std::string_view value = std::string_view(text_).substr(value_start_, end - value_start_);
  phase_ = Phase::CommaOrEnd;
  if (value_is_name_) {
    nlohmann::json name = nlohmann::json::parse(value, nullptr, false);
    if (!name.is_string()) return fail(out);
    name_ = name.get<std::string>();
    named_ = true;
    ++announced_;
    emit({.index = index_, .id = random_id("call_"), .name = name_, .arguments = std::move(held_arguments_)}, out);
    held_arguments_.clear();
    return;
  }
  if (!value_is_arguments_) return;
  args_open_ = false;
  if (value_is_string_) {
    // Double-encoded arguments: released decoded when the string holds JSON.
    nlohmann::json decoded = nlohmann::json::parse(value, nullptr, false);
    std::string inner = decoded.is_string() ? decoded.get<std::string>() : std::string();
    if (decoded.is_string() && !nlohmann::json::parse(inner, nullptr, false).is_discarded()) {
      if (named_)
        emit({.index = index_, .arguments = inner}, out);
      else
        held_arguments_ += inner;
      args_released_ = end;
      return;
    }
  }
  release_arguments(end, out);
}

void ToolCallScanner::end_object(std::vector<ToolCallDelta>& out) {
  if (!named_) return fail(out);
  if (!has_arguments_) emit({.index = index_, .arguments = "{}"}, out);
  ++index_;
  named_ = has_arguments_ = args_open_ = false;
  phase_ = Phase::SeparatorOrEnd;
  end_offset_ = pos_ + 1;
}

void ToolCallScanner::fail(std::vector<ToolCallDelta>& out) {
  if (named_) {
    // Committed to this call: the rest of the text is its arguments.
    if (!args_open_) args_released_ = pos_;
    args_open_ = false;
    phase_ = Phase::Broken;
    release_arguments(text_.size(), out);
    pos_ = text_.size();
    return;
  }
  if (announced_ == 0) {
    phase_ = Phase::NotACall;
    return;
  }
  // Earlier calls stand; this object and what follows are text.
  phase_ = Phase::ListEnd;
  end_offset_ = object_start_;
}

void ToolCallScanner::release_arguments(size_t until, std::vector<ToolCallDelta>& out) {
  if (until <= args_released_) return;
  std::string piece = text_.substr(args_released_, until - args_released_);
  args_released_ = until;
  if (named_)
    emit({.index = index_, .arguments = std::move(piece)}, out);
  else
    held_arguments_ += piece;
}

void ToolCallScanner::emit(ToolCallDelta piece, std::vector<ToolCallDelta>& out) {
  const bool first_piece = !piece.id.empty();
  if (!first_piece && piece.arguments.empty()) return;
  if (!out.empty() && out.back().index == piece.index && !first_piece) {
    out.back().arguments += piece.arguments;
    return;
  }
  out.push_back(std::move(piece));
}

}  // namespace brioche::server
