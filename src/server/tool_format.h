// Tool-call formats: one definition per format of the literals that the
// prompt (a call opened for tool_choice required/named), the grammar (what a
// constrained call ends with) and the output parser (what marks a call) must
// agree on. A new model family's format is one more entry here.
//
//   Hermes / Qwen:  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama-3 JSON:   {"name": "f", "parameters": {...}}   (optionally after <|python_tag|>)
#pragma once

#include <string>
#include <string_view>

namespace brioche::server {

enum class ToolSyntax { None, Hermes, Llama3Json };

struct ToolFormat {
  std::string_view call_open;      // marks the start of a call ("" for Llama-3 JSON)
  std::string_view call_close;     // marks its end
  std::string_view arguments_key;  // the call object's key for the arguments
  std::string_view python_tag;     // an optional marker before a bare JSON call
};

inline constexpr ToolFormat kHermesFormat{
    .call_open = "<tool_call>", .call_close = "</tool_call>", .arguments_key = "arguments", .python_tag = ""};
inline constexpr ToolFormat kLlama3JsonFormat{
    .call_open = "", .call_close = "", .arguments_key = "parameters", .python_tag = "<|python_tag|>"};

// The format of `syntax` (None reads as Hermes: our fallback prompt documents Hermes calls).
constexpr const ToolFormat& tool_format(ToolSyntax syntax) {
  return syntax == ToolSyntax::Llama3Json ? kLlama3JsonFormat : kHermesFormat;
}

// Picks the tool-call syntax a chat template expects.
ToolSyntax tool_syntax_for_template(const std::string& chat_template);

// The text the server appends to the prompt to open a call the model must
// complete: tool_choice "required" opens a call, a named tool_choice also
// writes the name (JSON-escaped) and the arguments key, so the model
// continues with the arguments object.
std::string tool_call_prefill(ToolSyntax syntax, const std::string* function_name);

// The text a constrained call's grammar must end with after the arguments
// object: "\n</tool_call>" for Hermes, "" for Llama-3 JSON.
std::string tool_call_suffix(ToolSyntax syntax);

}  // namespace brioche::server
