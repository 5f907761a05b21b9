// Bounded JSON parsing for everything that reads JSON a user or a file can
// shape (request bodies, schemas in strings, tool arguments, model configs,
// tokenizer.json, datasets).
//
// nlohmann's parser is iterative, but copying, dumping, comparing and every
// walker of ours (schema conversion, the template's Value conversion) recurse
// once per nesting level, so a body of 100,000 '[' overflows the stack of
// whichever thread touches it next. The class fix is one bound at the door:
// a linear pre-scan refuses nesting deeper than kMaxJsonDepth before the
// parser allocates anything, and every recursive walker below may then
// assume depth <= kMaxJsonDepth.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace brioche {

// Deeper than any real schema, message or config (the JSON Schema Store's
// deepest is under 40 levels); shallow enough that a walker spending a few
// KiB of stack per level stays far inside a 2 MiB thread stack.
inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in `text`, counting brackets
// outside strings (string escapes honoured). Malformed text gets a number,
// not an error: the parser reports malformation with a better message.
inline int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return deepest;
}

// The error a too-deep document gets; `what` names the document ("the request
// body", "tokenizer.json").
inline std::string json_depth_message(std::string_view what, int found, int limit = kMaxJsonDepth) {
  return error_message(what, ": arrays/objects nested ", found, " levels deep; the limit is ", limit);
}

// Parse `text` into JsonT (nlohmann::json or ordered_json). Throws
// brioche::Error naming `what` when the text nests deeper than `max_depth`
// or is not JSON.
template <typename JsonT = nlohmann::json>
JsonT parse_json_bounded(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth) {
  int depth = json_nesting_depth(text);
  if (depth > max_depth) throw Error(json_depth_message(what, depth, max_depth));
  try {
    return JsonT::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double (1e400).
    throw Error(error_message(what, " is not valid JSON: ", e.what()));
  }
}

// As parse_json_bounded, but a malformed or too-deep text gives a discarded
// value (is_discarded()) instead of throwing: for the places that try a
// parse and fall back (tool arguments the model wrote, a schema in a string).
template <typename JsonT = nlohmann::json>
JsonT try_parse_json_bounded(std::string_view text, int max_depth = kMaxJsonDepth) {
  if (json_nesting_depth(text) > max_depth) return JsonT(JsonT::value_t::discarded);
  try {
    return JsonT::parse(text, nullptr, /*allow_exceptions=*/false);
  } catch (const nlohmann::json::exception&) {  // out_of_range is thrown even so
    return JsonT(JsonT::value_t::discarded);
  }
}

}  // namespace brioche
