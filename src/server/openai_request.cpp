#include "server/openai_request.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/json_limits.h"

namespace brioche::server {
namespace {

using nlohmann::json;

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const json& found) {
  throw invalid_param(param, "'" + param + "' must be " + expected + ", got " + json_type_name(found));
}

// Field readers: absent or null -> nullopt; wrong type or range -> ApiError.
std::optional<double> get_number(const json& body, const char* key, double lo, double hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) wrong_type(key, "a number", *it);
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    throw invalid_param(key, "'" + std::string(key) + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                                 "], got " + it->dump());
  return v;
}

std::optional<int64_t> get_int(const json& body, const char* key, int64_t lo, int64_t hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
    wrong_type(key, "an integer", *it);
  double d = it->get<double>();
  if (d < double(lo) || d > double(hi))
    throw invalid_param(key, "'" + std::string(key) + "' must be in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got " + it->dump());
  return int64_t(d);
}

std::optional<bool> get_bool(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) wrong_type(key, "a boolean", *it);
  return it->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) wrong_type(key, "a string", *it);
  return it->get<std::string>();
}

// "content": a string, or an array of parts [{"type":"text","text":...}].
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string part_param = param + "[" + std::to_string(i) + "]";
    if (part.is_string()) {  // lenient: bare strings
      text += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) wrong_type(part_param, "a content part object", part);
    std::string type = part.value("type", "");
    if (type == "text" || type == "input_text" || type == "output_text") {
      auto t = part.find("text");
      if (t == part.end() || !t->is_string())
        throw invalid_param(part_param + ".text", "a text content part needs a string 'text'");
      text += t->get<std::string>();
    } else {
      throw invalid_param(part_param + ".type",
                          "content part type '" + type + "' is not supported by this model (expected 'text')");
    }
  }
  return text;
}

json normalize_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) wrong_type(param, "an array", calls);
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    std::string p = param + "[" + std::to_string(i) + "]";
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      throw invalid_param(p, "a tool call must be an object with a 'function' object");
    json fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      throw invalid_param(p + ".function.name", "a tool call needs a string 'name'");
    // Templates expect arguments as a mapping; clients send a JSON string.
    if (fn.contains("arguments") && fn["arguments"].is_string()) {
      const std::string& text = fn["arguments"].get_ref<const std::string&>();
      if (int depth = json_nesting_depth(text); depth > kMaxJsonDepth)
        throw invalid_param(p + ".function.arguments", json_depth_message("the arguments", depth));
      json parsed = try_parse_json_bounded(text);
      if (!parsed.is_discarded()) fn["arguments"] = parsed;
    }
    json c = {{"type", "function"}, {"function", fn}};
    if (call.contains("id")) c["id"] = call["id"];
    out.push_back(c);
  }
  return out;
}

json normalize_messages(const json& messages, const std::string& param) {
  if (!messages.is_array()) wrong_type(param, "an array of messages", messages);
  if (messages.empty()) throw invalid_param(param, "'" + param + "' must contain at least one message");
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    std::string p = param + "[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(p, "a message object", m);
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string())
      throw invalid_param(p + ".role", "each message needs a string 'role'");
    std::string role = role_it->get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw invalid_param(p + ".role",
                          "role must be one of system, developer, user, assistant, tool; got '" + role + "'");
    json msg = {{"role", role}, {"content", content_text(m.value("content", json()), p + ".content")}};
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null())
      msg["tool_calls"] = normalize_tool_calls(m["tool_calls"], p + ".tool_calls");
    if (role == "assistant" && m.contains("reasoning_content") && m["reasoning_content"].is_string())
      msg["reasoning_content"] = m["reasoning_content"];
    if (role == "tool") {
      if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) msg["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) msg["name"] = m["name"];
    }
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_tools(const json& body, ApiRequest& req) {
  auto it = body.find("tools");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_array()) wrong_type("tools", "an array", *it);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& tool = (*it)[i];
      std::string p = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) wrong_type(p, "an object", tool);
      // Chat Completions nests {"function": {...}}; the Responses API is flat.
      json fn = tool.contains("function") ? tool["function"] : tool;
      if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
        throw invalid_param(p + ".function.name", "each tool needs a function with a string 'name'");
      if (tool.value("type", "function") != "function")
        throw invalid_param(p + ".type", "only tools of type 'function' are supported");
      if (fn.contains("parameters") && !fn["parameters"].is_object())
        wrong_type(p + ".function.parameters", "a JSON Schema object", fn["parameters"]);
      if (req.tools.is_null()) req.tools = json::array();
      req.tools.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!req.tools.is_null() && req.tools.empty()) req.tools = nullptr;
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      std::string v = choice->get<std::string>();
      if (v == "auto")
        req.tool_choice = ToolChoiceMode::Auto;
      else if (v == "none")
        req.tool_choice = ToolChoiceMode::None;
      else if (v == "required")
        req.tool_choice = ToolChoiceMode::Required;
      else
        throw invalid_param("tool_choice",
                            "tool_choice must be 'auto', 'none', 'required' or a named function; got '" + v + "'");
    } else if (choice->is_object()) {
      const json& c = *choice;
      std::string name;
      if (c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
          c["function"]["name"].is_string())
        name = c["function"]["name"].get<std::string>();
      else if (c.contains("name") && c["name"].is_string())
        name = c["name"].get<std::string>();
      else
        throw invalid_param("tool_choice",
                            "a named tool_choice needs {\"type\": \"function\", \"function\": {\"name\": ...}}");
      req.tool_choice = ToolChoiceMode::Named;
      req.tool_choice_name = name;
    } else {
      wrong_type("tool_choice", "a string or an object", *choice);
    }
    if ((req.tool_choice == ToolChoiceMode::Required || req.tool_choice == ToolChoiceMode::Named) &&
        req.tools.is_null())
      throw invalid_param(
          "tool_choice", "tool_choice '" +
                             std::string(req.tool_choice == ToolChoiceMode::Named ? req.tool_choice_name : "required") +
                             "' needs a non-empty 'tools' list");
    if (req.tool_choice == ToolChoiceMode::Named) {
      bool found = false;
      for (const json& t : req.tools) found |= t["function"]["name"] == req.tool_choice_name;
      if (!found)
        throw invalid_param("tool_choice",
                            "tool_choice names function '" + req.tool_choice_name + "', which is not in 'tools'");
    }
  }
  if (auto p = get_bool(body, "parallel_tool_calls")) req.parallel_tool_calls = *p;
}

// A token id a request names (`param` says where): an integer in [0, vocab_size).
int32_t token_id(const json& value, const std::string& param, int32_t vocab_size) {
  if (!value.is_number_integer()) wrong_type(param, "a token id (an integer)", value);
  bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() < uint64_t(vocab_size)
                                             : value.get<int64_t>() >= 0 && value.get<int64_t>() < vocab_size;
  if (!in_range)
    throw invalid_param(
        param, "token id " + value.dump() + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  return int32_t(value.get<int64_t>());
}

// min_max_tokens: 0 for completions (echo with max_tokens 0 scores the prompt only).
void parse_sampling(const json& body, ApiRequest& req, const char* max_tokens_key, const RequestBounds& bounds,
                    int64_t min_max_tokens = 1) {
  engine::SamplingParams& s = req.generation.sampling;
  if (auto v = get_number(body, "temperature", 0.0, 2.0)) s.temperature = float(*v);
  if (auto v = get_number(body, "top_p", 0.0, 1.0)) s.top_p = float(*v);
  if (auto v = get_int(body, "top_k", -1, 1 << 20)) s.top_k = int(*v);
  if (auto v = get_number(body, "min_p", 0.0, 1.0)) s.min_p = float(*v);
  if (auto v = get_number(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = float(*v);
  if (auto v = get_number(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = float(*v);
  if (auto v = get_number(body, "repetition_penalty", 0.01, 10.0)) s.repetition_penalty = float(*v);
  if (auto v = get_int(body, "seed", INT64_MIN, INT64_MAX)) s.seed = uint64_t(*v);
  auto bias = body.find("logit_bias");
  if (bias != body.end() && !bias->is_null()) {
    if (!bias->is_object()) wrong_type("logit_bias", "an object mapping token ids to numbers", *bias);
    for (auto& [key, value] : bias->items()) {
      // Keys are decimal ids ("50256"); anything else (signs, spaces, hex,
      // more digits than an int64) is not an id.
      bool digits = !key.empty() && key.size() <= 18 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits)
        throw invalid_param("logit_bias", "logit_bias keys must be token ids (decimal integers), got '" + key + "'");
      int32_t id = token_id(json(std::strtoll(key.c_str(), nullptr, 10)), "logit_bias", bounds.vocab_size);
      if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100)
        throw invalid_param("logit_bias", "logit_bias values must be numbers in [-100, 100], got " + value.dump() +
                                              " for token " + key);
      s.logit_bias.emplace_back(id, value.get<float>());
    }
  }
  for (const char* key : {max_tokens_key, "max_tokens"}) {
    if (auto v = get_int(body, key, min_max_tokens, 1 << 30)) {
      req.generation.max_tokens = int32_t(*v);
      req.max_tokens_given = true;
      break;
    }
  }
  if (auto v = get_int(body, "n", 1, 128)) req.generation.n = int32_t(*v);
  auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) req.generation.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16)
        throw invalid_param("stop", "at most 16 stop strings are supported, got " + std::to_string(stop->size()));
      for (const json& s_item : *stop) {
        if (!s_item.is_string()) wrong_type("stop", "a string or an array of strings", *stop);
        if (!s_item.get<std::string>().empty()) req.generation.stop.push_back(s_item.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
  }
  if (auto v = get_string(body, "user")) req.user = *v;
  if (auto v = get_bool(body, "stream")) req.stream = *v;
  auto opts = body.find("stream_options");
  if (opts != body.end() && !opts->is_null()) {
    if (!opts->is_object()) wrong_type("stream_options", "an object", *opts);
    if (auto v = get_bool(*opts, "include_usage")) req.include_usage = *v;
  }
  if (auto v = get_bool(body, "ignore_eos")) req.generation.ignore_eos = *v;
  // brioche extension: false opts this request out of speculative decoding
  // (same output; docs/speculative.md).
  if (auto v = get_bool(body, "speculative")) req.generation.speculative = *v;
}

}  // namespace

ApiRequest parse_api_request(Endpoint endpoint, const std::string& body_text, const RequestBounds& bounds) {
  if (int depth = json_nesting_depth(body_text); depth > kMaxJsonDepth)
    throw ApiError{.status = 400,
                   .message = json_depth_message("the request body", depth),
                   .type = "invalid_request_error",
                   .param = "",
                   .code = "nesting_too_deep"};
  json body = try_parse_json_bounded(body_text);
  if (body.is_discarded())
    throw ApiError{.status = 400,
                   .message = "the request body is not valid JSON",
                   .type = "invalid_request_error",
                   .param = "",
                   .code = "invalid_json"};
  if (!body.is_object())
    throw status_error(400, std::string("the request body must be a JSON object, got ") + json_type_name(body));
  ApiRequest req;
  req.endpoint = endpoint;
  auto model = body.find("model");
  if (model != body.end() && !model->is_null()) {
    if (!model->is_string()) wrong_type("model", "a string", *model);
    req.model = model->get<std::string>();
  }

  switch (endpoint) {
    case Endpoint::ChatCompletions: {
      auto m = body.find("messages");
      if (m == body.end()) throw invalid_param("messages", "'messages' is required");
      req.messages = normalize_messages(*m, "messages");
      parse_tools(body, req);
      parse_sampling(body, req, "max_completion_tokens", bounds);
      req.logprobs = get_bool(body, "logprobs").value_or(false);
      if (auto v = get_int(body, "top_logprobs", 0, 20)) {
        req.top_logprobs = int(*v);
        if (!req.logprobs) throw invalid_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      }
      auto kwargs = body.find("chat_template_kwargs");
      if (kwargs != body.end() && kwargs->is_object())
        if (auto v = get_bool(*kwargs, "enable_thinking")) req.enable_thinking = *v;
      break;
    }
    case Endpoint::Completions: {
      auto p = body.find("prompt");
      if (p == body.end() || p->is_null()) throw invalid_param("prompt", "'prompt' is required");
      if (p->is_string()) {
        req.prompt = p->get<std::string>();
      } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
        req.prompt = (*p)[0].get<std::string>();
      } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
        for (size_t i = 0; i < p->size(); ++i)
          req.prompt_token_ids.push_back(token_id((*p)[i], "prompt[" + std::to_string(i) + "]", bounds.vocab_size));
      } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array() && !(*p)[0].empty()) {
        // A batch of one token-id prompt, [[ids]] (lm-evaluation-harness sends this).
        const json& ids = (*p)[0];
        for (size_t i = 0; i < ids.size(); ++i)
          req.prompt_token_ids.push_back(token_id(ids[i], "prompt[0][" + std::to_string(i) + "]", bounds.vocab_size));
      } else if (p->is_array() && p->size() > 1) {
        throw invalid_param(
            "prompt", "batched prompts (an array of several prompts) are not supported; send one request per prompt");
      } else {
        wrong_type("prompt", "a string or an array of token ids", *p);
      }
      parse_sampling(body, req, "max_tokens", bounds, 0);
      if (auto v = get_int(body, "logprobs", 0, 20)) {
        req.logprobs = true;
        req.top_logprobs = int(*v);
      }
      req.echo = get_bool(body, "echo").value_or(false);
      if (req.max_tokens_given && req.generation.max_tokens == 0 && !req.echo)
        throw invalid_param(
            "max_tokens",
            "max_tokens 0 scores the prompt only and needs 'echo': true; without echo it must be at least 1");
      // OpenAI: with echo, logprobs cover the prompt's tokens too.
      req.generation.prompt_logprobs = req.echo && (req.logprobs || req.generation.max_tokens == 0);
      if (!req.max_tokens_given) req.generation.max_tokens = 16;  // OpenAI's default for completions
      break;
    }
    case Endpoint::Responses: {
      auto input = body.find("input");
      if (input == body.end() || input->is_null()) throw invalid_param("input", "'input' is required");
      if (auto instr = get_string(body, "instructions"))
        req.messages.push_back({{"role", "system"}, {"content", *instr}});
      if (input->is_string()) {
        req.messages.push_back({{"role", "user"}, {"content", input->get<std::string>()}});
      } else if (input->is_array()) {
        json msgs = json::array();
        for (const json& item : *input) {
          if (item.is_object() && item.value("type", "message") == "message")
            msgs.push_back(item);
          else
            throw invalid_param(
                "input", "input items must be messages ({\"role\", \"content\"}); other item types are not supported");
        }
        for (json& m : normalize_messages(msgs, "input")) req.messages.push_back(std::move(m));
      } else {
        wrong_type("input", "a string or an array of messages", *input);
      }
      parse_tools(body, req);
      parse_sampling(body, req, "max_output_tokens", bounds);
      req.responses_echo = {
          {"tools", json::array()}, {"tool_choice", "auto"}, {"parallel_tool_calls", req.parallel_tool_calls}};
      if (auto t = body.find("tools"); t != body.end() && t->is_array()) req.responses_echo["tools"] = *t;
      if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) req.responses_echo["tool_choice"] = *c;
      if (req.generation.n != 1) throw invalid_param("n", "the Responses API produces one output");
      break;
    }
  }
  if (!req.generation.stop.empty() && req.generation.stop.size() > 16)
    throw invalid_param("stop", "at most 16 stop strings");
  return req;
}

}  // namespace brioche::server
