// Splits generated text into reasoning, content and tool calls, while streaming.
//
// Reasoning: text inside <think>...</think> at the start of the output (or
// from the start when the prompt already opened <think>) becomes
// `reasoning_content`.
// Tool calls, two syntaxes:
//   Hermes / Qwen:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>  (several allowed)
//   Llama-3 JSON:   the output starts with {"name": "f", "parameters": {...}}
//                   (optionally after <|python_tag|>; several joined by ';')
// Calls come out as streamed pieces (ToolCallDelta, tool_call_scanner.h): a
// call is announced with its id and name as soon as the name is complete,
// then its arguments follow in fragments as they are generated, exactly as
// the model wrote them, so the fragments concatenate to the final arguments.
// Text that might still turn into a marker ("<tool_c") is held back until it
// is decided, so streamed content never shows half a tag. A tool call that
// never gets a name is returned as plain content, never dropped.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_scanner.h"
#include "server/tool_format.h"

namespace brioche::server {

struct ParsedToolCall {
  std::string id;  // "call_<random>"
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;  // pieces, in order (a piece with an id starts a call)
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
  bool split_reasoning = true;
  bool starts_in_reasoning = false;  // the prompt ended inside <think>
  ToolSyntax tools = ToolSyntax::None;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ParsedDelta push(std::string_view text);
  ParsedDelta finish();  // end of output: release what was held back
  int tool_call_count() const { return n_tool_calls_; }

 private:
  enum class Mode { Start, Reasoning, Content, HermesCall, JsonCall };
  void run(ParsedDelta& out, bool at_end);
  void take_calls(std::vector<ToolCallDelta> pieces, ParsedDelta& out);

  OutputParserOptions options_;
  Mode mode_;
  std::string pending_;
  bool content_started_ = false;   // non-whitespace content was emitted
  bool strip_leading_ws_ = false;  // after </think>
  bool after_tool_call_ = false;   // no text since the last tool call
  int n_tool_calls_ = 0;
  std::optional<ToolCallScanner> scanner_;
  int scanner_first_ = 0;  // calls announced before scanner_ started  // the call(s) being read (HermesCall, JsonCall)
};

// Adds streamed pieces to complete calls: a piece with an id starts call
// number `index`, later pieces append to its arguments.
// Appends pieces to a list of pieces, merging a fragment into the piece
// before it when both belong to the same call (one entry per call per chunk).
void merge_tool_call_pieces(std::vector<ToolCallDelta>& into, std::vector<ToolCallDelta> more);

void append_tool_call_pieces(std::vector<ParsedToolCall>& calls, const std::vector<ToolCallDelta>& pieces);

std::string random_id(std::string_view prefix, int length = 24);

}  // namespace brioche::server
