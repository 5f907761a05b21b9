#include "server/request_translator.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace brioche::server {
namespace {

using nlohmann::json;

ApiError model_not_found(const std::string& asked, const std::string& served) {
  // OpenAI and vLLM answer an unknown model with 404.
  return ApiError{.status = 404,
                  .message = "the model '" + asked + "' does not exist; this server serves '" + served +
                             "' and the adapters GET /v1/models lists",
                  .type = "invalid_request_error",
                  .param = "model",
                  .code = "model_not_found"};
}

// The adapter `model` names (null for the base model or no `model`).
std::shared_ptr<const model::ServedAdapter> requested_adapter(const ServedModel& served, const std::string& asked) {
  if (asked.empty() || asked == served.model_id) return nullptr;
  std::shared_ptr<const model::ServedAdapter> adapter = served.adapters ? served.adapters->acquire(asked) : nullptr;
  if (!adapter) throw model_not_found(asked, served.model_id);
  return adapter;
}

// The tokenizer's BOS is added unless the rendered prompt already starts
// with it (most chat templates write it themselves).
bool needs_bos(const engine::Engine& engine, const std::string& prompt) {
  const auto& tokenizer = engine.tokenizer();
  if (!tokenizer || !tokenizer->add_bos()) return false;
  if (tokenizer->bos_id() < 0) return true;
  return prompt.rfind(tokenizer->token_text(tokenizer->bos_id()), 0) != 0;
}

// The tools the template shows: all of them, or only the one a named
// tool_choice picks; none when tools are off.
json tools_for_prompt(const ApiRequest& req) {
  if (req.tools.is_null() || req.tool_choice == ToolChoiceMode::None) return json();
  if (req.tool_choice != ToolChoiceMode::Named) return req.tools;
  json only = json::array();
  for (const json& t : req.tools)
    if (t["function"]["name"] == req.tool_choice_name) only.push_back(t);
  return only;
}

void translate_completion(const ServedModel& served, const std::string& body, ApiRequest& req, TranslatedRequest& out) {
  if (!req.prompt_token_ids.empty()) {
    out.generation.prompt_tokens = req.prompt_token_ids;  // range-checked by parse_api_request
  } else {
    bool add_bos = served.engine.tokenizer() && served.engine.tokenizer()->add_bos();
    out.generation.prompt_tokens = served.engine.tokenize(req.prompt, {.add_bos = add_bos});
  }
  if (req.echo) {
    // A prompt of token ids echoes as their text (as OpenAI's does).
    if (req.prompt_token_ids.empty())
      out.response.echo_text = req.prompt;
    else
      for (int32_t t : req.prompt_token_ids) out.response.echo_text += served.engine.codec().token_bytes(t);
  }
  // echo + max_tokens 0 without logprobs: the engine still scores the prompt
  // (that is the request's only work), the response leaves logprobs out.
  if (out.generation.prompt_logprobs && out.generation.top_logprobs < 0) out.generation.top_logprobs = 0;
  if (out.generation.prompt_logprobs && out.response.logprobs && !out.generation.prompt_tokens.empty())
    out.response.echo_first_token = served.engine.codec().token_bytes(out.generation.prompt_tokens.front());
  // No chat template to inject into: a degraded request only gets the Warning header.
  StructuredOutputPlan plan =
      served.structured.prepare(parse_structured_output(body, req, /*hermes_tools=*/false, /*tool_open=*/""));
  out.generation.constraint = std::move(plan.constraint);
  out.warning = std::move(plan.warning);
}

void translate_chat(const ServedModel& served, const std::string& body, ApiRequest& req, TranslatedRequest& out) {
  const bool use_tools = !req.tools.is_null() && req.tool_choice != ToolChoiceMode::None;
  const bool opens_call =
      use_tools && (req.tool_choice == ToolChoiceMode::Required || req.tool_choice == ToolChoiceMode::Named);
  const bool hermes = served.tool_syntax != ToolSyntax::Llama3Json;
  // What the prompt ends with so the model must complete a call.
  std::string call_prefill;
  if (opens_call)
    call_prefill = tool_call_prefill(served.tool_syntax,
                                     req.tool_choice == ToolChoiceMode::Named ? &req.tool_choice_name : nullptr);
  const std::string call_open = opens_call ? tool_call_prefill(served.tool_syntax, nullptr) : "";

  StructuredOutputSpec spec = parse_structured_output(body, req, hermes, call_open);
  StructuredOutputPlan plan = served.structured.prepare(spec);
  inject_system_prompt(req.messages, plan.system_prompt);  // the degrade path
  out.warning = std::move(plan.warning);

  std::string prompt = served.prompter.render(
      {.messages = req.messages, .tools = tools_for_prompt(req), .enable_thinking = req.enable_thinking});
  ResponseContext& ctx = out.response;
  ctx.parser.split_reasoning = true;
  ctx.parser.tools = use_tools ? served.tool_syntax : ToolSyntax::None;
  ctx.parser.starts_in_reasoning = prompt_opens_reasoning(prompt);
  prompt += call_prefill;
  ctx.prefill = call_prefill;
  out.generation.prompt_tokens = served.engine.tokenize(prompt, {.add_bos = needs_bos(served.engine, prompt)});
  // Thinking models: the grammar starts after the reasoning block (a call
  // prefilled in the prompt has none).
  if (spec.kind != StructuredOutputSpec::Kind::ToolCall || !spec.trigger.empty())
    start_after_reasoning(plan.constraint, prompt, ctx.parser.starts_in_reasoning, served.engine);
  out.generation.constraint = std::move(plan.constraint);
}

// The prompt fits with room for one token; max_tokens defaults to the room
// left (chat, responses) or stays at the endpoint's default (completions: 16).
void fit_context(const engine::Engine& engine, Endpoint endpoint, const ApiRequest& req,
                 engine::GenerationRequest& gen) {
  const std::string param = endpoint == Endpoint::Completions ? "prompt"
                            : endpoint == Endpoint::Responses ? "input"
                                                              : "messages";
  const int32_t n_prompt = int32_t(gen.prompt_tokens.size());
  if (n_prompt == 0) throw invalid_param(param, "the prompt is empty");
  if (n_prompt >= engine.context_length())
    throw ApiError{.status = 400,
                   .message = "the prompt has " + std::to_string(n_prompt) + " tokens but the model's context holds " +
                              std::to_string(engine.context_length()) + " (including at least one generated token)",
                   .type = "invalid_request_error",
                   .param = param,
                   .code = "context_length_exceeded"};
  const int32_t room = engine.context_length() - n_prompt;
  const bool endpoint_default = endpoint == Endpoint::Completions && !req.max_tokens_given;
  gen.max_tokens = req.max_tokens_given || endpoint_default ? std::min(gen.max_tokens, room) : room;
}

}  // namespace

bool prompt_opens_reasoning(const std::string& prompt) {
  size_t open = prompt.rfind("<think>");
  if (open == std::string::npos) return false;
  size_t after = open + std::string_view("<think>").size();
  return prompt.find_first_not_of(" \t\r\n", after) == std::string::npos;
}

TranslatedRequest translate_request(const ServedModel& served, Endpoint endpoint, const std::string& body) {
  TranslatedRequest out;
  try {
    ApiRequest req = parse_api_request(endpoint, body, {.vocab_size = served.engine.vocab_size()});
    std::shared_ptr<const model::ServedAdapter> adapter = requested_adapter(served, req.model);
    out.generation = std::move(req.generation);
    out.generation.adapter = adapter;
    ResponseContext& ctx = out.response;
    ctx.endpoint = endpoint;
    ctx.model = adapter ? adapter->name : served.model_id;
    ctx.stream = req.stream;
    ctx.include_usage = req.include_usage;
    ctx.n = out.generation.n;
    ctx.logprobs = req.logprobs;
    ctx.responses_echo = req.responses_echo;
    out.generation.top_logprobs = req.logprobs ? req.top_logprobs : -1;
    if (endpoint == Endpoint::Completions)
      translate_completion(served, body, req, out);
    else
      translate_chat(served, body, req, out);
    fit_context(served.engine, endpoint, req, out.generation);
  } catch (const brioche::Error& e) {
    // Template errors (raise_exception on an unsupported conversation),
    // tokenizer input errors, grammar limits: the request's fault.
    throw status_error(400, e.what());
  }
  return out;
}

}  // namespace brioche::server
