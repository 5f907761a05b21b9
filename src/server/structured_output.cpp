#include "server/structured_output.h"

#include <cstdlib>

#include "core/env_switch.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace brioche::server {

using nlohmann::json;
using nlohmann::ordered_json;
using Kind = StructuredOutputSpec::Kind;

namespace {

const char* type_name(const ordered_json& v) { return v.type_name(); }

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const ordered_json& got) {
  throw invalid_param(field, "'" + field + "' must be " + expected + ", got " + type_name(got));
}

std::optional<bool> bool_field(const ordered_json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) wrong_type(where + "." + key, "a boolean", *it);
  return it->get<bool>();
}

std::string string_field(const ordered_json& v, const std::string& field) {
  if (!v.is_string()) wrong_type(field, "a string", v);
  return v.get<std::string>();
}

std::vector<std::string> choices_field(const ordered_json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) wrong_type(field, "a non-empty array of strings", v);
  std::vector<std::string> out;
  for (const ordered_json& c : v) {
    if (!c.is_string()) wrong_type(field + "[]", "a string", c);
    out.push_back(c.get<std::string>());
  }
  return out;
}

// A schema sent as a JSON string: parsed with the nesting bound every
// user-shaped JSON gets (the converter recurses per level).
ordered_json schema_from_string(const std::string& text, const std::string& field) {
  if (int depth = json_nesting_depth(text); depth > kMaxJsonDepth)
    throw invalid_param(field, json_depth_message("'" + field + "'", depth));
  ordered_json schema = try_parse_json_bounded<ordered_json>(text);
  if (schema.is_discarded()) throw invalid_param(field, "'" + field + "' is a string but not valid JSON");
  return schema;
}

// `{"type":"json_schema", ...}` / `{"type":"json_object"}` / `{"type":"text"}`.
bool parse_response_format(const ordered_json& body, StructuredOutputSpec& spec) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return false;
  const ordered_json& rf = *it;
  if (!rf.is_object()) wrong_type("response_format", "an object", rf);
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    throw invalid_param("response_format.type",
                        "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
  std::string t = type->get<std::string>();
  if (t == "text") return false;
  if (t == "json_object") {
    spec.kind = Kind::JsonObject;
    spec.field = "response_format";
    return true;
  }
  if (t != "json_schema")
    throw invalid_param("response_format.type",
                        "'response_format.type' must be 'text', 'json_object' or 'json_schema'; got '" + t + "'");
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    throw invalid_param("response_format.json_schema",
                        "'response_format' of type 'json_schema' needs a 'json_schema' object");
  spec.field = "response_format.json_schema.schema";
  if (auto name = js->find("name"); name != js->end() && !name->is_null())
    spec.name = string_field(*name, "response_format.json_schema.name");
  spec.strict = bool_field(*js, "strict", "response_format.json_schema").value_or(false);
  auto aw = bool_field(*js, "any_whitespace", "response_format.json_schema");
  if (!aw) aw = bool_field(rf, "any_whitespace", "response_format");
  spec.any_whitespace = aw.value_or(true);
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    spec.kind = Kind::JsonObject;  // no schema: any JSON
    return true;
  }
  spec.kind = Kind::JsonSchema;
  spec.schema = *schema;
  return true;
}

// vLLM's `structured_outputs` object, or (reference design) a bare schema.
bool parse_structured_outputs(const ordered_json& body, StructuredOutputSpec& spec) {
  auto it = body.find("structured_outputs");
  if (it == body.end() || it->is_null()) return false;
  const ordered_json& so = *it;
  if (so.is_object()) {
    if (auto j = so.find("json"); j != so.end() && !j->is_null()) {
      spec.field = "structured_outputs.json";
      if (j->is_string()) {
        spec.schema = schema_from_string(j->get<std::string>(), spec.field);
      } else {
        spec.schema = *j;
      }
      spec.kind = Kind::JsonSchema;
      return true;
    }
    if (auto g = so.find("grammar"); g != so.end() && !g->is_null()) {
      spec = {.kind = Kind::Grammar,
              .field = "structured_outputs.grammar",
              .text = string_field(*g, "structured_outputs.grammar")};
      return true;
    }
    if (auto r = so.find("regex"); r != so.end() && !r->is_null()) {
      spec = {.kind = Kind::Regex,
              .field = "structured_outputs.regex",
              .text = string_field(*r, "structured_outputs.regex")};
      return true;
    }
    if (auto c = so.find("choice"); c != so.end() && !c->is_null()) {
      spec = {.kind = Kind::Choice,
              .field = "structured_outputs.choice",
              .choices = choices_field(*c, "structured_outputs.choice")};
      return true;
    }
    if (bool_field(so, "json_object", "structured_outputs").value_or(false)) {
      spec = {.kind = Kind::JsonObject, .field = "structured_outputs.json_object"};
      return true;
    }
  }
  if (!so.is_object() && !so.is_boolean()) wrong_type("structured_outputs", "a JSON schema or an object", so);
  spec.kind = Kind::JsonSchema;
  spec.field = "structured_outputs";
  spec.schema = so;
  return true;
}

// Moves a tool's `$defs`/`definitions` under the combined schema's `$defs`
// with a per-tool prefix and rewrites its `$ref`s to match.
void hoist_defs(ordered_json& schema, const std::string& prefix, ordered_json& defs) {
  for (const char* key : {"$defs", "definitions"}) {
    auto it = schema.find(key);
    if (it == schema.end() || !it->is_object()) continue;
    for (auto& [name, def] : it->items()) defs[prefix + name] = def;
    schema.erase(key);
  }
  auto rewrite = [&](auto& self, ordered_json& node) -> void {
    if (node.is_object()) {
      for (auto& [k, v] : node.items()) {
        if (k == "$ref" && v.is_string()) {
          std::string ref = v.template get<std::string>();
          for (const char* base : {"#/$defs/", "#/definitions/"})
            if (ref.rfind(base, 0) == 0) v = "#/$defs/" + prefix + ref.substr(std::string(base).size());
        } else {
          self(self, v);
        }
      }
    } else if (node.is_array()) {
      for (auto& v : node) self(self, v);
    }
  };
  rewrite(rewrite, schema);
  for (auto& [name, def] : defs.items())
    if (name.rfind(prefix, 0) == 0) rewrite(rewrite, def);
}

ordered_json parameters_of(const json& tool) {
  const json& fn = tool["function"];
  if (fn.contains("parameters") && fn["parameters"].is_object()) return ordered_json::parse(fn["parameters"].dump());
  return ordered_json{{"type", "object"}};
}

// The whole call `{"name": "f", "arguments": {...}}` for any of `tools`.
ordered_json call_schema(const json& tools, const char* arguments_key) {
  ordered_json any = ordered_json::array();
  ordered_json defs = ordered_json::object();
  for (const json& tool : tools) {
    std::string name = tool["function"]["name"].get<std::string>();
    ordered_json params = parameters_of(tool);
    hoist_defs(params, name + "__", defs);
    ordered_json call = {{"type", "object"},
                         {"properties", {{"name", {{"const", name}}}, {arguments_key, params}}},
                         {"required", {"name", arguments_key}},
                         {"additionalProperties", false}};
    any.push_back(std::move(call));
  }
  ordered_json schema = any.size() == 1 ? any[0] : ordered_json{{"anyOf", any}};
  if (!defs.empty()) schema["$defs"] = defs;
  return schema;
}

bool tool_is_strict(const json& tool) {
  const json& fn = tool["function"];
  return fn.contains("strict") && fn["strict"].is_boolean() && fn["strict"].get<bool>();
}

bool parse_tools_constraint(const ApiRequest& req, bool hermes, const std::string& tool_open,
                            StructuredOutputSpec& spec) {
  if (req.tools.is_null() || req.tool_choice == ToolChoiceMode::None) return false;
  const char* args_key = hermes ? "arguments" : "parameters";
  std::string close = hermes ? "\n</tool_call>" : "";
  if (req.tool_choice == ToolChoiceMode::Named) {
    for (const json& tool : req.tools) {
      if (tool["function"]["name"] != req.tool_choice_name) continue;
      // The prompt already holds `{"name": "f", "arguments": `: the grammar is the arguments, then the close.
      spec.kind = Kind::ToolCall;
      spec.field = "tools[" + req.tool_choice_name + "].function.parameters";
      spec.name = req.tool_choice_name;
      spec.schema = parameters_of(tool);
      spec.strict = tool_is_strict(tool);
      spec.suffix = "}" + close;
      return true;
    }
    return false;
  }
  if (req.tool_choice == ToolChoiceMode::Required) {
    spec.kind = Kind::ToolCall;
    spec.field = "tools[].function.parameters";
    spec.name = "tool_call";
    spec.schema = call_schema(req.tools, args_key);
    spec.strict = std::any_of(req.tools.begin(), req.tools.end(), tool_is_strict);
    spec.suffix = tool_open.empty() ? "" : close;
    return true;
  }
  // auto: constrain a call the model opens, to the strict tools (Hermes tags only).
  json strict_tools = json::array();
  for (const json& tool : req.tools)
    if (tool_is_strict(tool)) strict_tools.push_back(tool);
  if (strict_tools.empty() || !hermes) return false;
  spec.kind = Kind::ToolCall;
  spec.field = "tools[].function.parameters";
  spec.name = "tool_call";
  spec.schema = call_schema(strict_tools, args_key);
  spec.strict = true;
  spec.suffix = close;
  spec.trigger = "<tool_call>";
  return true;
}

}  // namespace

grammar::Grammar structured_output_grammar(const StructuredOutputSpec& spec) {
  switch (spec.kind) {
    case Kind::Grammar: return grammar::Grammar::from_ebnf(spec.text);
    // strict (OpenAI's `strict: true`, guided_strict): OpenAI's reading, an
    // object without additionalProperties takes only its listed properties.
    // Otherwise JSON Schema's own reading: unlisted properties are allowed
    // unless the schema says additionalProperties: false (docs/grammar.md).
    // A oneOf whose branches may overlap, or a uniqueItems the grammar
    // cannot enforce, is refused under strict (400); otherwise compiled as
    // their union / without it, which beats the unconstrained degrade path.
    case Kind::JsonSchema:
      return grammar::Grammar::from_json_schema(spec.schema, {.any_whitespace = spec.any_whitespace,
                                                              .strict = spec.strict,
                                                              .one_of_as_any_of = !spec.strict,
                                                              .unique_items_approximate = !spec.strict});
    case Kind::JsonObject: return grammar::Grammar::builtin_json_object();  // OpenAI: an object at the top
    case Kind::Regex: return grammar::Grammar::from_regex(spec.text);
    case Kind::Choice: return grammar::Grammar::from_choices(spec.choices);
    case Kind::ToolCall: {
      // Compact separators: the call is read by a parser, not a person.
      // Arguments are closed objects whatever `strict` says: a call is read
      // by a program that expects the parameters it declared.
      // An overlapping oneOf: refused with a strict tool, their union otherwise.
      std::string text = grammar::json_schema_to_ebnf(
          spec.schema,
          {.any_whitespace = false, .one_of_as_any_of = !spec.strict, .unique_items_approximate = !spec.strict});
      text += "\nbrioche_tool_call ::= ";
      if (!spec.trigger.empty()) text += "\"\\n\"? ";
      text += "root";
      if (!spec.suffix.empty()) text += " " + grammar::ebnf_quote(spec.suffix);
      text += "\n";
      return grammar::Grammar::from_ebnf(text, "brioche_tool_call");
    }
    case Kind::None: break;
  }
  BRIOCHE_CHECK(false, "structured_output_grammar: no structured output requested");
  return {};
}

namespace {

// What the degrade path asks the model for in words.
std::string degrade_prompt(const StructuredOutputSpec& spec) {
  switch (spec.kind) {
    case Kind::JsonSchema:
    case Kind::ToolCall:
      return "You must respond with valid JSON matching the '" + spec.name + "' schema. JSON Schema:\n```json\n" +
             spec.schema.dump(2) + "\n```";
    case Kind::JsonObject: return "You must respond with a valid JSON object.";
    case Kind::Regex: return "You must respond with text matching the regular expression: " + spec.text;
    case Kind::Choice: {
      std::string s = "You must respond with exactly one of the following, and nothing else:";
      for (const std::string& c : spec.choices) s += "\n- " + c;
      return s;
    }
    case Kind::Grammar: return "You must respond with text matching this grammar (EBNF):\n" + spec.text;
    case Kind::None: break;
  }
  return {};
}

// RFC 7234 warn-value: 199 (miscellaneous warning), agent, quoted text on one line.
std::string warning_value(const std::string& text) {
  std::string clean;
  for (char c : text) {
    if (c == '"' || c == '\\')
      clean += '\'';
    else if (c == '\n' || c == '\r' || c == '\t')
      clean += ' ';
    else if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f)
      clean += c;
  }
  if (clean.size() > 400) clean = clean.substr(0, 397) + "...";
  return "199 brioche \"" + clean + "\"";
}

}  // namespace

StructuredOutputSpec parse_structured_output(const std::string& body_text, const ApiRequest& request, bool hermes_tools,
                                             const std::string& tool_open) {
  StructuredOutputSpec spec;
  ordered_json body = try_parse_json_bounded<ordered_json>(body_text);
  if (body.is_discarded() || !body.is_object()) return spec;  // parse_api_request already rejected it
  bool jump = env_flag_set("BRIOCHE_GRAMMAR_JUMP") || bool_field(body, "jump_forward", "request").value_or(false);
  // Responses API: `text.format` is response_format with the json_schema fields flattened.
  if (request.endpoint == Endpoint::Responses && !body.contains("response_format")) {
    auto text = body.find("text");
    if (text != body.end() && text->is_object() && text->contains("format") && (*text)["format"].is_object()) {
      ordered_json format = (*text)["format"];
      ordered_json rf = {{"type", format.value("type", "text")}};
      if (rf["type"] == "json_schema") {
        ordered_json js = format;
        js.erase("type");
        rf["json_schema"] = js;
      }
      body["response_format"] = rf;
    }
  }

  // The call is the reply: tool_choice required/named wins.
  if (request.tool_choice == ToolChoiceMode::Required || request.tool_choice == ToolChoiceMode::Named) {
    if (parse_tools_constraint(request, hermes_tools, tool_open, spec)) {
      spec.jump_forward = jump;
      return spec;
    }
  }
  auto field = [&](const char* key) -> const ordered_json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const ordered_json* g = field("guided_grammar")) {
    spec = {.kind = Kind::Grammar, .field = "guided_grammar", .text = string_field(*g, "guided_grammar")};
  } else if (parse_response_format(body, spec)) {
    // json_schema before json_object: one field, so the order holds by construction.
  } else if (parse_structured_outputs(body, spec)) {
  } else if (const ordered_json* r = field("guided_regex")) {
    spec = {.kind = Kind::Regex, .field = "guided_regex", .text = string_field(*r, "guided_regex")};
  } else if (const ordered_json* c = field("guided_choice")) {
    spec = {.kind = Kind::Choice, .field = "guided_choice", .choices = choices_field(*c, "guided_choice")};
  } else if (const ordered_json* j = field("guided_json")) {  // vLLM's older spelling
    spec.kind = Kind::JsonSchema;
    spec.field = "guided_json";
    spec.schema = j->is_string() ? schema_from_string(j->get<std::string>(), "guided_json") : *j;
  } else {
    parse_tools_constraint(request, hermes_tools, tool_open, spec);  // strict tools under auto
  }
  if (spec.kind == Kind::JsonSchema && !spec.schema.is_object() && !spec.schema.is_boolean())
    wrong_type(spec.field, "a JSON schema (an object)", spec.schema);
  if (auto s = bool_field(body, "guided_strict", "request"); s && spec.kind != Kind::None) spec.strict = *s;
  spec.jump_forward = jump;
  return spec;
}

StructuredOutputCompiler::StructuredOutputCompiler(const engine::Engine& engine, StructuredOutputOptions options)
    : engine_(engine), options_(options), enabled_(env_switch_on("BRIOCHE_GRAMMAR")) {}

grammar::GrammarCache& StructuredOutputCompiler::cache() {
  std::call_once(built_, [&] {
    BRIOCHE_CHECK(engine_.tokenizer() != nullptr, "structured output needs the model's tokenizer");
    grammar::GrammarCacheOptions options;
    options.max_bytes = options_.grammar_cache_bytes;
    options.limits.max_work = options_.max_compile_work;
    // The first structured request pays once (~0.1-0.2 s with Llama-3's
    // vocabulary) for the masks every JSON schema shares; later schemas then
    // compile in a few ms instead of tens.
    options.prewarm = true;
    cache_ = std::make_unique<grammar::GrammarCache>(
        engine::grammar_vocabulary(*engine_.tokenizer(), engine_.vocab_size()), options);
  });
  return *cache_;
}

StructuredOutputPlan StructuredOutputCompiler::prepare(const StructuredOutputSpec& spec) {
  StructuredOutputPlan plan;
  if (spec.kind == Kind::None) return plan;
  auto degrade = [&](const std::string& why) {
    plan.warning = warning_value("structured output not enforced (" + spec.field + "): " + why);
    plan.system_prompt = degrade_prompt(spec);
    return plan;
  };
  if (!enabled_) return degrade("grammar compilation is disabled (BRIOCHE_GRAMMAR=0)");
  if (!engine_.tokenizer()) return degrade("this model has no tokenizer for grammar masks");
  try {
    grammar::Grammar g = structured_output_grammar(spec);
    plan.constraint.compiled = cache().get(g);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    if (spec.strict)
      throw invalid_param(spec.field, "invalid structured output in '" + spec.field + "': " + std::string(e.what()));
    return degrade(e.what());
  }
  plan.constraint.jump_forward = spec.jump_forward;
  if (!spec.trigger.empty()) {
    // Free text until the model opens a call; then the call is constrained.
    plan.constraint.starts_in_reasoning = true;
    plan.constraint.reasoning_close = spec.trigger;
  }
  return plan;
}

void start_after_reasoning(engine::GrammarConstraint& constraint, const std::string& prompt, bool starts_in_reasoning,
                           const engine::Engine& engine) {
  if (!constraint.compiled || !constraint.reasoning_close.empty()) return;
  if (starts_in_reasoning) {
    constraint.starts_in_reasoning = true;
    constraint.reasoning_close = "</think>";
    return;
  }
  // A thinking model may open its block itself, unless the prompt already
  // closed one for it (enable_thinking false).
  const auto& tok = engine.tokenizer();
  if (!tok) return;
  std::optional<int32_t> open = tok->token_id("<think>");
  if (!open || !tok->token_id("</think>")) return;
  size_t end = prompt.find_last_not_of(" \n\r\t");
  std::string_view trimmed = std::string_view(prompt).substr(0, end == std::string::npos ? 0 : end + 1);
  if (trimmed.size() >= 8 && trimmed.substr(trimmed.size() - 8) == "</think>") return;
  constraint.reasoning_open_token = *open;
  constraint.reasoning_close = "</think>";
}

void inject_system_prompt(json& messages, const std::string& system_prompt) {
  if (system_prompt.empty()) return;
  if (!messages.empty() && messages[0].value("role", "") == "system" && messages[0]["content"].is_string()) {
    messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + system_prompt;
    return;
  }
  messages.insert(messages.begin(), json{{"role", "system"}, {"content", system_prompt}});
}

}  // namespace brioche::server
