#include "template/chat_template.h"

#include "core/error.h"
#include "template/lexer.h"
#include "template/parser.h"

namespace brioche::tmpl {

struct ChatTemplate::Parsed {
  std::string name;
  std::string source;
  RenderLimits limits;
  Body body;
};

ChatTemplate ChatTemplate::parse(std::string source, std::string name, RenderLimits limits) {
  auto parsed = std::make_shared<Parsed>();
  parsed->name = std::move(name);
  parsed->source = std::move(source);
  parsed->limits = limits;
  std::vector<Token> tokens = tokenize(parsed->source, parsed->name);
  parsed->body = parse_template(tokens, parsed->name);
  validate_template(parsed->body, parsed->name);
  ChatTemplate t;
  t.parsed_ = std::move(parsed);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  BRIOCHE_CHECK(context.is_object(), parsed_->name, ": template context must be a JSON object, got ",
                context.type_name());
  Value ctx;
  try {
    ctx = Value::from_json(context);
  } catch (const RenderFailure& f) {
    fail(parsed_->name, ": bad template context: ", f.message);
  }
  Renderer renderer(parsed_->name, parsed_->limits);
  try {
    return renderer.render(parsed_->body, ctx);
  } catch (const RenderFailure& f) {  // failures outside any statement (none expected) still name the template
    fail(parsed_->name, ": ", f.message);
  }
}

const std::string& ChatTemplate::name() const { return parsed_->name; }
const std::string& ChatTemplate::source() const { return parsed_->source; }

static nlohmann::ordered_json normalize_message(const nlohmann::ordered_json& message) {
  BRIOCHE_CHECK(message.is_object(), "chat message must be a JSON object, got ", message.type_name());
  nlohmann::ordered_json clean = nlohmann::ordered_json::object();
  for (const auto& [k, v] : message.items())
    if (!v.is_null()) clean[k] = v;
  // transformers: {"thinking": r, **message, "reasoning_content": r}
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    if (!clean.contains(field)) continue;
    nlohmann::ordered_json reasoning = clean[field];
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = reasoning;
    for (const auto& [k, v] : clean.items()) aliased[k] = v;
    aliased["reasoning_content"] = reasoning;
    return aliased;
  }
  return clean;
}

nlohmann::ordered_json chat_context(const ChatRequest& request) {
  BRIOCHE_CHECK(request.messages.is_array(), "chat messages must be a JSON array, got ", request.messages.type_name());
  BRIOCHE_CHECK(request.extra.is_object(), "chat template kwargs must be a JSON object, got ",
                request.extra.type_name());
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (request.bos_token) context["bos_token"] = *request.bos_token;
  if (request.eos_token) context["eos_token"] = *request.eos_token;
  for (const auto& [k, v] : request.extra.items()) context[k] = v;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const auto& m : request.messages) messages.push_back(normalize_message(m));
  context["messages"] = std::move(messages);
  context["tools"] = request.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = request.add_generation_prompt;
  return context;
}

std::string render_chat(const ChatTemplate& tmpl, const ChatRequest& request) {
  return tmpl.render(chat_context(request));
}

static std::string content_text(const nlohmann::ordered_json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  std::string text;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_string())
        text += part.get<std::string>();
      else if (part.is_object() && part.contains("text") && part["text"].is_string())
        text += part["text"].get<std::string>();
    }
    return text;
  }
  return content.dump();
}

std::string plain_chat_format(const ChatRequest& request) {
  std::string out;
  if (request.tools.is_array() && !request.tools.empty()) out += "Tools: " + request.tools.dump() + "\n\n";
  const nlohmann::ordered_json context = chat_context(request);
  for (const auto& m : context["messages"]) {
    std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "user";
    if (!role.empty() && role[0] >= 'a' && role[0] <= 'z') role[0] = char(role[0] - 32);
    out += role + ": " + content_text(m.contains("content") ? m["content"] : nlohmann::ordered_json());
    if (m.contains("tool_calls") && m["tool_calls"].is_array())
      for (const auto& call : m["tool_calls"])
        out += "\n<tool_call>" + call.value("function", call).dump() + "</tool_call>";
    out += "\n\n";
  }
  if (request.add_generation_prompt) out += "Assistant:";
  return out;
}

std::optional<std::string> select_chat_template(const nlohmann::json& field, bool has_tools) {
  if (field.is_string()) return field.get<std::string>();
  if (!field.is_array()) return std::nullopt;
  auto find = [&](const char* name) -> std::optional<std::string> {
    for (const auto& entry : field)
      if (entry.is_object() && entry.value("name", "") == name && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    return std::nullopt;
  };
  if (has_tools)
    if (auto t = find("tool_use")) return t;
  return find("default");
}

}  // namespace brioche::tmpl
