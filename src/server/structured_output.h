// Structured output for the OpenAI endpoints: which request field asks for
// what, compiling it (through one grammar cache per engine) into the engine's
// GrammarConstraint, and the degrade path when it cannot be compiled.
//
// Fields (chat, completions, responses; the Responses API's `text.format`
// is read as response_format), highest precedence first (the
// reference design's order): `guided_grammar` (EBNF/GBNF) >
// `response_format: {type: json_schema, json_schema: {name, schema, strict,
// any_whitespace}}` > `response_format: {type: json_object}` >
// `structured_outputs` (a bare schema, or vLLM's {json|regex|choice|grammar|
// json_object}) > `guided_regex` > `guided_choice`. Tools: `tool_choice`
// required/named constrains the call to the function's parameter schema
// (this wins over the fields above: the reply must be the call); a tool with
// `strict: true` under tool_choice auto constrains the call once the model
// opens one (Hermes `<tool_call>`).
//
// Malformed schema/grammar: with strict (json_schema.strict or the tool's
// strict) a 400 naming where; otherwise the request degrades: for chat a
// system message asks for the format, and a `Warning` response header names
// the problem. BRIOCHE_GRAMMAR=0 turns compilation off (degrade everywhere);
// BRIOCHE_GRAMMAR_JUMP=1 (or the request field `jump_forward: true`) turns
// jump-forward decoding on.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/constraint.h"
#include "grammar/compiler.h"
#include "server/openai_request.h"

namespace brioche::engine {
class Engine;
}

namespace brioche::server {

struct StructuredOutputSpec {
  enum class Kind { None, Grammar, JsonSchema, JsonObject, Regex, Choice, ToolCall };
  Kind kind = Kind::None;
  std::string field;                 // request field it came from, for messages ("response_format.json_schema.schema")
  std::string name = "response";     // schema name (degrade prompt)
  nlohmann::ordered_json schema;     // JsonSchema, ToolCall (the call's schema)
  std::string text;                  // Grammar (EBNF), Regex
  std::vector<std::string> choices;  // Choice
  bool strict = false;               // malformed -> 400 instead of degrade
  bool any_whitespace = true;
  // ToolCall: text the grammar must end with (e.g. "}\n</tool_call>") and
  // whether the grammar waits for the model to open a call (tool_choice auto).
  std::string suffix;
  std::string trigger;
  bool jump_forward = false;
};

// Reads the structured-output fields of a request body. Throws ApiError for
// fields of the wrong type. `tool_open` is what the server prefilled to open
// a required/named call ("" when none), so the grammar continues after it.
StructuredOutputSpec parse_structured_output(const std::string& body_text, const ApiRequest& request, bool hermes_tools,
                                             const std::string& tool_open);

// The grammar a spec asks for (what prepare() compiles). Throws
// brioche::Error for a schema/grammar/regex that does not convert (too
// deep, unsupported keyword, syntax), naming the limit or the keyword.
grammar::Grammar structured_output_grammar(const StructuredOutputSpec& spec);

struct StructuredOutputPlan {
  engine::GrammarConstraint constraint;  // compiled == null: unconstrained
  std::string warning;                   // non-empty: send as a `Warning` header
  std::string system_prompt;             // non-empty (chat only): inject as a system message
};

struct StructuredOutputOptions {
  // Bytes the compiled-grammar cache may hold (least recently used grammars
  // are evicted past it; one larger grammar serves its request uncached).
  size_t grammar_cache_bytes = 256ull << 20;
  // Work budget of one compilation (grammar::CompileLimits::max_work): a
  // count, so the same grammar gets the same answer under any load.
  uint64_t max_compile_work = grammar::kDefaultCompileWork;
};

// One per server (engine): the grammar vocabulary is built on first use.
class StructuredOutputCompiler {
 public:
  explicit StructuredOutputCompiler(const engine::Engine& engine, StructuredOutputOptions options = {});
  // Compiles `spec` (cached by grammar content). Throws ApiError 400 when the
  // spec is strict and malformed; otherwise degrades (see the plan's fields).
  StructuredOutputPlan prepare(const StructuredOutputSpec& spec);
  bool enabled() const { return enabled_; }
  const grammar::GrammarCache* cache() const { return cache_.get(); }

 private:
  grammar::GrammarCache& cache();
  const engine::Engine& engine_;
  StructuredOutputOptions options_;
  bool enabled_ = true;
  std::once_flag built_;
  std::unique_ptr<grammar::GrammarCache> cache_;
};

// Thinking models: the grammar starts after the reasoning block. Sets the
// constraint's reasoning fields from the rendered prompt and the vocabulary.
void start_after_reasoning(engine::GrammarConstraint& constraint, const std::string& prompt, bool starts_in_reasoning,
                           const engine::Engine& engine);

// Adds `system_prompt` as (or into) the leading system message.
void inject_system_prompt(nlohmann::json& messages, const std::string& system_prompt);

}  // namespace brioche::server
