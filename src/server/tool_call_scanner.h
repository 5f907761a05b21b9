// Reads tool calls out of model text while it is being generated, so that a
// call's arguments can be streamed in pieces (OpenAI's delta.tool_calls).
//
// The text is a list of call objects, {"name": "f", "arguments": {...}}
// ("parameters" is accepted for "arguments"), optionally inside [ ... ] and
// separated by ',' or ';' (Llama 3 joins parallel calls with ';'). The
// scanner walks the JSON incrementally, one character at a time, and keeps
// its position between feeds:
//
//   - a call is announced once its "name" string is complete;
//   - the text of its arguments value is released as it arrives, exactly as
//     the model wrote it (so the pieces concatenate to the final arguments);
//     arguments written before the name are held until the name is known;
//   - arguments given as a JSON string holding JSON ("double-encoded") are
//     held to the end of the string and released decoded;
//   - an object without arguments gets "{}" when it closes.
//
// Before the first name the scanner has released nothing, so text that turns
// out not to be a call can still be shown as content (not_a_call()). After a
// name, malformed JSON does not take the call back: the rest of the text is
// released as that call's arguments (as OpenAI's models can also produce
// arguments that do not parse).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace brioche::server {

// One piece of a streamed tool call. The first piece of a call carries its
// id and name; every piece may carry an arguments fragment.
struct ToolCallDelta {
  int index = 0;     // the call's number in this output, from 0
  std::string id;    // set on the call's first piece only
  std::string name;  // set on the call's first piece only
  std::string arguments;
};

class ToolCallScanner {
 public:
  // first_index: the number of calls already announced in this output.
  explicit ToolCallScanner(int first_index);

  // Appends text; returns the pieces it completes (coalesced per call).
  std::vector<ToolCallDelta> feed(std::string_view text);
  // No more text: closes what is open (a call cut short keeps what it has;
  // a named call without arguments gets "{}").
  std::vector<ToolCallDelta> finish();

  // The text is not a list of calls and nothing was announced: the caller
  // shows text() as content.
  bool not_a_call() const { return phase_ == Phase::NotACall; }
  // The list ended (']' or an object followed by something that is not a
  // separator): text after end_offset() is not part of the calls.
  bool list_ended() const { return phase_ == Phase::ListEnd; }
  size_t end_offset() const { return end_offset_; }
  int calls_announced() const { return announced_; }
  const std::string& text() const { return text_; }

 private:
  enum class Phase {
    ListStart,    // before the first '[' or '{'
    ObjectStart,  // expecting '{' (after a separator)
    KeyOrEnd,     // inside an object: a key string or '}'
    Key,          // inside a key string
    Colon,
    ValueStart,
    Value,           // inside a value (nested, string or scalar)
    CommaOrEnd,      // after a value: ',' or '}'
    SeparatorOrEnd,  // after an object: ',' ';' ']' or more objects
    Broken,          // malformed after a name: the rest is arguments
    ListEnd,
    NotACall,
  };
  void step(char ch, std::vector<ToolCallDelta>& out);
  void end_value(std::vector<ToolCallDelta>& out);
  void end_object(std::vector<ToolCallDelta>& out);
  void fail(std::vector<ToolCallDelta>& out);
  void release_arguments(size_t until, std::vector<ToolCallDelta>& out);
  void emit(ToolCallDelta piece, std::vector<ToolCallDelta>& out);

  std::string text_;
  size_t pos_ = 0;  // next character of text_ to scan
  Phase phase_ = Phase::ListStart;
  bool in_list_ = false;  // saw '['
  int index_;             // index of the object being scanned
  int announced_ = 0;
  size_t end_offset_ = 0;

  // The object being scanned.
  size_t object_start_ = 0;  // offset of its '{'
  std::string key_;          // raw key text (between the quotes)
  bool key_escape_ = false;
  size_t value_start_ = 0;
  int value_depth_ = 0;  // open brackets inside the value
  bool value_in_string_ = false, value_escape_ = false, value_is_string_ = false;
  bool value_is_name_ = false, value_is_arguments_ = false;
  std::string name_;
  bool named_ = false;
  bool has_arguments_ = false;
  size_t args_start_ = 0, args_released_ = 0;  // offsets in text_ of the arguments value
  bool args_open_ = false;                     // arguments value being scanned
  std::string held_arguments_;                 // arguments released before the name
};

}  // namespace brioche::server
