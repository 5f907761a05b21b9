// Boost.Beast HTTP/1.1 server: listener, per-connection sessions, routing.
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <utility>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <variant>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/printable.h"
#include "server/adapter_registry.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/http_framing.h"
#include "server/jobs_api.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/server.h"
#include "server/request_translator.h"
#include "server/static_files.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"
#include "train/dataset.h"
#include "model/model.h"
#include "server/tokenize_routes.h"

namespace brioche::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Shared state of a running server.
class App : public std::enable_shared_from_this<App> {
 public:
  App(std::shared_ptr<engine::Engine> engine, ServerOptions options);
  void start();
  void begin_shutdown();
  void wait();
  uint16_t port() const { return port_; }

  std::shared_ptr<engine::Engine> engine;
  ServerOptions options;
  Metrics metrics;
  std::string model_id;
  std::unique_ptr<ChatPrompter> prompter;
  ToolSyntax tool_syntax = ToolSyntax::Hermes;
  std::unique_ptr<StructuredOutputCompiler> structured;  // grammar cache over the engine's vocabulary
  std::unique_ptr<AdapterRegistry> adapters;             // LoRA adapters served as models
  std::unique_ptr<JobsApi> jobs;                         // files and fine-tuning jobs (--data-dir); null without
  std::filesystem::path web_root;                        // --web-dir, resolved; empty: the embedded web UI only
  std::atomic<bool> shutting_down{false};
  net::io_context ioc;
  // Requests being translated (translate_request) off the I/O threads.
  net::thread_pool prepare_pool{size_t(std::max(1, options.prepare_threads))};
  // Requests waiting for or in preparation: at most --max-queue of them, and
  // bodies of at most 8 x --max-body per preparation thread in all (a lone
  // one is always taken: an upload may be larger). A burst of small
  // requests (64 clients at once) waits its turn; many large bodies are
  // what the bound is for.
  std::atomic<int> preparing{0};
  std::atomic<size_t> preparing_bytes{0};
  size_t max_preparing_bytes() const {
    return size_t(std::max(1, options.prepare_threads)) * 8 * options.max_body_bytes;
  }
  // Admits a preparation of a body of `bytes`; else the 429 that says which bound it met.
  std::optional<ApiError> admit_preparation(size_t bytes) {
    const int waiting = preparing.fetch_add(1);
    const size_t held = preparing_bytes.fetch_add(bytes);
    if (waiting < options.max_queue && (waiting == 0 || held + bytes <= max_preparing_bytes())) return std::nullopt;
    end_preparation(bytes);
    const std::string bound = waiting >= options.max_queue
                                  ? "too many requests being prepared (" + std::to_string(options.max_queue) + ")"
                                  : "too many request bytes being prepared (" + size_text(max_preparing_bytes()) + ")";
    return ApiError{.status = 429,
                    .message = bound + "; retry shortly",
                    .type = "rate_limit_error",
                    .param = "",
                    .code = "queue_full"};
  }
  static std::string size_text(size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
  }
  void end_preparation(size_t bytes) {
    preparing_bytes -= bytes;
    --preparing;
  }
  ServedModel served() const {
    return ServedModel{.engine = *engine,
                       .prompter = *prompter,
                       .structured = *structured,
                       .tool_syntax = tool_syntax,
                       .model_id = model_id,
                       .adapters = adapters.get()};
  }

 private:
  void do_accept();
  tcp::acceptor acceptor_{ioc};
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
  std::atomic<bool> shutdown_started_{false};
};

namespace {

const char* endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::ChatCompletions: return "chat_completions";
    case Endpoint::Completions: return "completions";
    case Endpoint::Responses: return "responses";
  }
  return "other";
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<App> app)
      : stream_(std::move(socket)), app_(std::move(app)), timer_(stream_.get_executor()) {
    ++app_->metrics.open_connections;
  }
  ~Session() {
    --app_->metrics.open_connections;
    if (handle_ && !handle_->finished()) handle_->cancel();
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

 private:
  using Response = http::response<http::string_body>;

  void do_read() {
    parser_.emplace();
    parser_->body_limit(app_->options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::seconds(300));  // idle keep-alive / slow client limit
    // The header first: an upload to /v1/files may be larger than --max-body (up to --max-file-bytes).
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->on_read(ec, n);
      const std::string target(self->parser_->get().target());
      const std::string path = target.substr(0, target.find('?'));
      if (self->app_->jobs)
        self->parser_->body_limit(self->app_->jobs->body_limit(path, self->app_->options.max_body_bytes));
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       beast::bind_front_handler(&Session::on_read, self));
    });
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::body_limit) {
      const std::string target(parser_->get().target());
      if (app_->jobs && target.substr(0, target.find('?')) == "/v1/files") {
        send_error(
            ApiError{.status = 413,
                     .message = "the upload exceeds the file size limit of " +
                                std::to_string(app_->jobs->options().max_file_bytes) + " bytes (--max-file-bytes)",
                     .type = "invalid_request_error",
                     .param = "file",
                     .code = "file_too_large"},
            /*close=*/true);
        return;
      }
      send_error(ApiError{.status = 413,
                          .message = "the request body exceeds the limit of " +
                                     std::to_string(app_->options.max_body_bytes) + " bytes",
                          .type = "invalid_request_error",
                          .param = "",
                          .code = "request_too_large"},
                 /*close=*/true);
      return;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != net::error::operation_aborted &&
          ec != net::error::connection_reset && ec != net::error::eof) {
        // Malformed HTTP: answer once, then close.
        send_error(status_error(400, "malformed HTTP request: " + ec.message()), true);
        return;
      }
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    stream_.expires_never();
    request_ = parser_->release();
    if (std::optional<std::string> problem = framing_problem(request_)) {
      // The body's end is ambiguous: whatever follows cannot be trusted
      // to be the next request, so answer and close.
      send_error(status_error(400, *problem), /*close=*/true);
      return;
    }
    started_ = Clock::now();
    route();
  }

  void add_common_headers(Response& res) {
    res.set(http::field::server, "brioche");
    if (!app_->options.cors_origin.empty()) {
      res.set(http::field::access_control_allow_origin, app_->options.cors_origin);
      res.set("Access-Control-Expose-Headers", "Retry-After, Warning");
    }
    if (!warning_.empty()) res.set(http::field::warning, warning_);
  }

  void send(Response res, bool close = false) {
    add_common_headers(res);
    res.keep_alive(!close && request_.keep_alive());
    res.prepare_payload();
    if (head_) {  // a GET's headers, its Content-Length included, without the body (RFC 9110 §9.3.2)
      const size_t length = res.body().size();
      res.body().clear();
      res.content_length(length);
    }
    auto sp = std::make_shared<Response>(std::move(res));
    bool keep = sp->keep_alive();
    http::async_write(stream_, *sp, [self = shared_from_this(), sp, keep](beast::error_code ec, size_t) {
      if (ec) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        return;
      }
      if (!keep) return self->linger_close();
      self->do_read();
    });
  }

  // Closing a socket with unread input makes the kernel send RST, which can
  // destroy the response just written before the client reads it (a 413 to
  // a client still sending its body). So: close our half, then read and drop
  // whatever the client still sends, for at most kLingerSeconds.
  static constexpr int kLingerSeconds = 2;
  void linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(kLingerSeconds));
    drain_input();
  }
  void drain_input() {
    auto sink = std::make_shared<std::array<char, 16384>>();
    stream_.async_read_some(net::buffer(*sink), [self = shared_from_this(), sink](beast::error_code ec, size_t) {
      if (!ec) return self->drain_input();
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }

  void send_json(int status, const json& body, bool close = false) {
    Response res{http::status(status), request_.version()};
    res.set(http::field::content_type, "application/json");
    res.body() = dump_json(body);
    send(std::move(res), close);
  }

  ApiError timeout_error() const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", app_->options.request_timeout_s);
    return ApiError{
        .status = 408,
        .message = std::string("the request exceeded the server's per-request timeout of ") + seconds + " s",
        .type = "timeout_error",
        .param = "",
        .code = "timeout"};
  }

  void send_error(const ApiError& error, bool close = false) {
    if (!endpoint_.empty()) app_->metrics.count_request(endpoint_, error.status);
    Response res{http::status(error.status), request_.version() ? request_.version() : 11};
    res.set(http::field::content_type, "application/json");
    if (error.status == 429 || error.status == 503) res.set(http::field::retry_after, "1");
    if (error.status == 401) res.set(http::field::www_authenticate, "Bearer");
    // OpenAI clients retry 408 by default; the same request would hit the
    // same server-side limit again.
    if (error.code == "timeout") res.set("x-should-retry", "false");
    res.body() = dump_json(error.to_json());
    send(std::move(res), close);
  }

  void route() {
    std::string target(request_.target());
    std::string path = target.substr(0, target.find('?'));
    http::verb method = request_.method();
    endpoint_.clear();
    // HEAD is answered as GET without the body, on the read-only routes GET
    // serves without side effects (pages, /health, /metrics, /v1/models).
    head_ = method == http::verb::head;
    if (head_) method = http::verb::get;

    if (method == http::verb::options) {  // CORS preflight
      Response res{http::status::no_content, request_.version()};
      res.set(http::field::access_control_allow_methods, "GET, POST, DELETE, OPTIONS");
      // Echo what the browser asks for (the openai JS client sends x-stainless-* headers).
      std::string asked(request_[http::field::access_control_request_headers]);
      res.set(http::field::access_control_allow_headers, asked.empty() ? "Authorization, Content-Type" : asked);
      res.set(http::field::access_control_max_age, "86400");
      send(std::move(res));
      return;
    }
    if (path == "/health") {
      if (app_->shutting_down) return send_json(503, {{"status", "shutting_down"}});
      return send_json(200, {{"status", "ok"}});
    }
    if (path == "/metrics" && method == http::verb::get) {
      Response res{http::status::ok, request_.version()};
      res.set(http::field::content_type, "text/plain; version=0.0.4");
      AdapterCounts adapters;
      for (const AdapterInfo& a : app_->adapters->list()) {
        ++adapters.loaded;
        adapters.resident += a.resident ? 1 : 0;
      }
      res.body() = app_->metrics.render(app_->engine->stats(), adapters);
      return send(std::move(res));
    }
    bool api = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/tokenizer_info";
    if (api && !app_->options.api_key.empty()) {
      std::string auth(request_[http::field::authorization]);
      if (auth != "Bearer " + app_->options.api_key)
        return send_error(ApiError{
            .status = 401,
            .message = auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key",
            .type = "invalid_request_error",
            .param = "",
            .code = "invalid_api_key"});
    }
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return models_route(path, method);
    if (path == "/tokenize" || path == "/detokenize" || path == "/tokenizer_info") return tokenizer_route(path, method);
    if (app_->jobs && JobsApi::handles(path)) return jobs_route(path, target);
    if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter") {
      if (method != http::verb::post) return send_error(status_error(405, "use POST for " + path));
      return change_adapters(path == "/v1/load_lora_adapter");
    }
    std::optional<Endpoint> endpoint;
    if (path == "/v1/chat/completions")
      endpoint = Endpoint::ChatCompletions;
    else if (path == "/v1/completions")
      endpoint = Endpoint::Completions;
    else if (path == "/v1/responses")
      endpoint = Endpoint::Responses;
    if (endpoint) {
      endpoint_ = endpoint_label(*endpoint);
      if (method != http::verb::post) return send_error(status_error(405, "use POST for " + path));
      return start_generation(*endpoint);
    }
    if (method == http::verb::get && !api) return serve_static(path);
    send_error(ApiError{.status = 404,
                        .message = "no route for " + std::string(request_.method_string()) + " " + path,
                        .type = "invalid_request_error",
                        .param = "",
                        .code = "not_found"});
  }

  // GET /v1/models and /v1/models/{id}; DELETE /v1/models/{id} (OpenAI's
  // "delete a fine-tuned model": the adapter stops being served, its files
  // stay); GET /v1/models/{id}/files and /v1/models/{id}/files/{name}: an
  // adapter's files, to download it.
  void models_route(const std::string& path, http::verb method) {
    if (path == "/v1/models") {
      if (method != http::verb::get) return send_error(status_error(405, "use GET for " + path));
      return send_json(200, {{"object", "list"}, {"data", served_models()}});
    }
    const std::string rest = path.substr(std::string("/v1/models/").size());
    const size_t slash = rest.find('/');
    const std::string id = rest.substr(0, slash);
    const std::string sub = slash == std::string::npos ? "" : rest.substr(slash + 1);
    auto not_found = [&] {
      send_error(ApiError{.status = 404,
                          .message = "model '" + id + "' does not exist",
                          .type = "invalid_request_error",
                          .param = "model",
                          .code = "model_not_found"});
    };
    const std::vector<AdapterInfo> adapters = app_->adapters->list();
    auto adapter = std::find_if(adapters.begin(), adapters.end(), [&](const AdapterInfo& a) { return a.name == id; });
    if (sub.empty() && method == http::verb::get) {
      for (const json& m : served_models())
        if (m["id"] == id) return send_json(200, m);
      return not_found();
    }
    if (sub.empty() && method == http::verb::delete_) {
      if (id == app_->model_id) return send_error(status_error(403, "the base model '" + id + "' cannot be deleted"));
      if (adapter == adapters.end()) return not_found();
      if (!app_->adapters->runtime_allowed())
        return send_error(status_error(403, "deleting adapters is off: start the server with --allow-runtime-lora"));
      try {
        app_->adapters->unload(id);
      } catch (const ApiError& e) {
        return send_error(e);
      }
      return send_json(200, {{"id", id}, {"object", "model"}, {"deleted", true}});
    }
    if (sub.empty()) return send_error(status_error(405, "use GET or DELETE for " + path));
    if (method != http::verb::get) return send_error(status_error(405, "use GET for " + path));
    if (adapter == adapters.end()) {
      if (id == app_->model_id)
        return send_error(status_error(404, "the base model's files are not served; only adapters' are"));
      return not_found();
    }
    if (sub == "files") {
      json data = json::array();
      for (const AdapterFile& f : adapter_files(adapter->path))
        data.push_back({{"name", f.name}, {"bytes", f.bytes}, {"url", "/v1/models/" + id + "/files/" + f.name}});
      return send_json(200, {{"object", "list"}, {"data", data}});
    }
    if (sub.rfind("files/", 0) != 0) return send_error(status_error(404, "no route for GET " + path));
    // Reading a file is disk work: on the preparation pool.
    net::post(app_->prepare_pool, [self = shared_from_this(), dir = adapter->path, file = sub.substr(6)] {
      std::variant<std::string, ApiError> outcome = std::string();
      try {
        outcome = read_adapter_file(dir, file, kMaxAdapterDownloadBytes);
      } catch (const ApiError& e) {
        outcome = e;
      } catch (const std::exception& e) {
        outcome = status_error(500, std::string("reading the adapter file: ") + e.what());
      }
      net::post(self->stream_.get_executor(), [self, file, outcome = std::move(outcome)]() mutable {
        if (auto* error = std::get_if<ApiError>(&outcome)) return self->send_error(*error);
        Response res{http::status::ok, self->request_.version()};
        res.set(http::field::content_type, file.ends_with(".json") ? "application/json" : "application/octet-stream");
        res.set(http::field::content_disposition, "attachment; filename=\"" + file + "\"");
        res.set("X-Content-Type-Options", "nosniff");
        res.body() = std::move(std::get<std::string>(outcome));
        self->send(std::move(res));
      });
    });
  }

  // vLLM's tokenizer endpoints (tokenize_routes.h): cheap, answered on this thread.
  void tokenizer_route(const std::string& path, http::verb method) {
    const bool info = path == "/tokenizer_info";
    if (method != (info ? http::verb::get : http::verb::post))
      return send_error(status_error(405, std::string("use ") + (info ? "GET" : "POST") + " for " + path));
    try {
      if (info) return send_json(200, tokenizer_info_response(*app_->engine));
      if (path == "/tokenize") return send_json(200, tokenize_response(*app_->engine, request_.body()));
      return send_json(200, detokenize_response(*app_->engine, request_.body()));
    } catch (const ApiError& e) {
      return send_error(e);
    }
  }

  // The base model, then every adapter with the base as its parent (as vLLM lists LoRA modules).
  json served_models() const {
    const json base = {{"id", app_->model_id},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "brioche"},
                       {"root", app_->model_id},
                       {"parent", nullptr},
                       {"max_model_len", app_->engine->context_length()}};
    json models = json::array({base});
    for (const AdapterInfo& a : app_->adapters->list()) {
      json m = base;
      m["id"] = a.name;
      m["root"] = a.name;
      m["parent"] = app_->model_id;
      m["lora_rank"] = a.rank;
      models.push_back(m);
    }
    return models;
  }

  // POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
  // /v1/unload_lora_adapter {"lora_name"}: vLLM's shapes. Reading an adapter
  // is file work, so it runs on the preparation pool.
  void change_adapters(bool load) {
    if (!app_->adapters->runtime_allowed())
      return send_error(status_error(
          403, "runtime adapter loading is off: start the server with --allow-runtime-lora and --lora-dir"));
    net::post(app_->prepare_pool, [self = shared_from_this(), load] {
      std::variant<json, ApiError> outcome = self->apply_adapter_change(load);
      net::post(self->stream_.get_executor(), [self, outcome = std::move(outcome)] {
        if (auto* error = std::get_if<ApiError>(&outcome)) return self->send_error(*error);
        self->send_json(200, std::get<json>(outcome));
      });
    });
  }

  std::variant<json, ApiError> apply_adapter_change(bool load) const {
    try {
      const json body = parse_json_bounded(request_.body(), "request body");
      auto text_field = [&](const char* field) {
        if (!body.is_object() || !body.contains(field) || !body[field].is_string())
          throw ApiError{.status = 400,
                         .message = std::string("expected a string \"") + field + "\" in the JSON object body",
                         .type = "invalid_request_error",
                         .param = field,
                         .code = "invalid_value"};
        return body[field].get<std::string>();
      };
      const std::string name = text_field("lora_name");
      if (!load) {
        app_->adapters->unload(name);
        return json{{"object", "lora_adapter"}, {"id", name}, {"unloaded", true}};
      }
      const AdapterInfo info = app_->adapters->load(name, text_field("lora_path"));
      return json{{"object", "lora_adapter"},
                  {"id", info.name},
                  {"parent", app_->model_id},
                  {"lora_rank", info.rank},
                  {"bytes", info.bytes}};
    } catch (const ApiError& e) {
      return e;
    } catch (const Error& e) {
      return status_error(400, e.what());
    } catch (const std::exception& e) {
      return status_error(500, std::string("internal error changing adapters: ") + e.what());
    }
  }

  // Files and fine-tuning jobs (server/jobs_api.h): SQLite and uploads
  // checked through the tokenizer, so they run on the preparation pool.
  void jobs_route(const std::string& path, const std::string& target) {
    const size_t q = target.find('?');
    RouteRequest request{
        .method = std::string(request_.method_string()),
        .path = path,
        .query = parse_query(q == std::string::npos ? std::string_view() : std::string_view(target).substr(q + 1)),
        .content_type = std::string(request_[http::field::content_type]),
        .body = request_.body()};
    const size_t bytes = request.body.size();
    if (std::optional<ApiError> refused = app_->admit_preparation(bytes)) return send_error(*refused);
    net::post(app_->prepare_pool, [self = shared_from_this(), request = std::move(request), bytes] {
      std::variant<RouteReply, ApiError> outcome = ApiError{};
      try {
        outcome = self->app_->jobs->handle(request);
      } catch (const ApiError& e) {
        outcome = e;
      } catch (const Error& e) {
        outcome = status_error(400, e.what());
      } catch (const std::exception& e) {
        outcome = status_error(500, std::string("internal error in ") + request.path + ": " + e.what());
      }
      self->app_->end_preparation(bytes);
      net::post(self->stream_.get_executor(), [self, outcome = std::move(outcome)]() mutable {
        if (auto* error = std::get_if<ApiError>(&outcome)) return self->send_error(*error);
        RouteReply& reply = std::get<RouteReply>(outcome);
        if (reply.poll) return self->start_poll_stream(std::move(reply.poll));
        Response res{http::status(reply.status), self->request_.version()};
        res.set(http::field::content_type, reply.content_type);
        res.body() = std::move(reply.body);
        self->send(std::move(res));
      });
    });
  }

  // An SSE reply fed by polling (a job's events): headers, then whatever
  // poll() returns every RouteReply::kPollMs, until it says done.
  void start_poll_stream(std::function<std::string(bool&)> poll) {
    auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
    res->set(http::field::server, "brioche");
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->set("X-Accel-Buffering", "no");
    if (!app_->options.cors_origin.empty())
      res->set(http::field::access_control_allow_origin, app_->options.cors_origin);
    res->chunked(true);
    res->keep_alive(false);  // the stream ends the connection
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    auto shared_poll = std::make_shared<std::function<std::string(bool&)>>(std::move(poll));
    http::async_write_header(stream_, *sr,
                             [self = shared_from_this(), res, sr, shared_poll](beast::error_code ec, size_t) {
                               if (ec) return;
                               self->poll_stream_step(shared_poll);
                             });
  }

  void poll_stream_step(std::shared_ptr<std::function<std::string(bool&)>> poll) {
    bool done = app_->shutting_down.load();
    std::string text;
    try {
      text = (*poll)(done);
    } catch (const std::exception& e) {
      text =
          "data: " + dump_json(ApiError{.status = 500, .message = e.what(), .type = "server_error"}.to_json()) + "\n\n";
      done = true;
    }
    auto after_write = [self = shared_from_this(), poll, done](beast::error_code ec) {
      if (ec) return;
      if (done) {
        net::async_write(self->stream_, http::make_chunk_last(), [self](beast::error_code, size_t) {
          beast::error_code ignored;
          self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        });
        return;
      }
      self->timer_.expires_after(std::chrono::milliseconds(RouteReply::kPollMs));
      self->timer_.async_wait([self, poll](beast::error_code ec) {
        if (!ec) self->poll_stream_step(poll);
      });
    };
    if (text.empty()) return after_write({});
    auto data = std::make_shared<std::string>(std::move(text));
    net::async_write(stream_, http::make_chunk(net::buffer(*data)),
                     [data, after_write](beast::error_code ec, size_t) { after_write(ec); });
  }

  // The embedded web UI, or --web-dir's files first (server/static_files.h).
  void serve_static(const std::string& path) {
    const beast::string_view if_none_match = request_[http::field::if_none_match];
    StaticReply reply =
        static_reply(app_->web_root, path, std::string_view(if_none_match.data(), if_none_match.size()));
    if (reply.status == 404) return send_error(status_error(404, "no file at " + path));
    Response res{http::status(reply.status), request_.version()};
    res.set(http::field::content_type, reply.content_type);
    res.set(http::field::etag, reply.etag);
    res.set(http::field::cache_control, "no-cache");
    res.set("X-Content-Type-Options", "nosniff");
    res.body() = std::move(reply.body);
    send(std::move(res));
  }

  // ---- generation ---------------------------------------------------------

  // The request's CPU work (parsing, the template, tokenising, compiling a
  // grammar) runs on the preparation pool, never on this I/O thread: a
  // multi-megabyte prompt or a large schema must not stall /health or the
  // other connections. The pool is bounded: more waiting preparations than
  // it holds get 429.
  void start_generation(Endpoint endpoint) {
    if (app_->shutting_down)
      return send_error(ApiError{.status = 503,
                                 .message = "the server is shutting down",
                                 .type = "server_error",
                                 .param = "",
                                 .code = "shutting_down"});
    const size_t bytes = request_.body().size();
    if (std::optional<ApiError> refused = app_->admit_preparation(bytes)) return send_error(*refused);
    net::post(app_->prepare_pool, [self = shared_from_this(), endpoint, bytes] {
      std::variant<TranslatedRequest, ApiError> outcome = self->translate(endpoint);
      self->app_->end_preparation(bytes);
      net::post(self->stream_.get_executor(), [self, outcome = std::move(outcome)]() mutable {
        if (auto* error = std::get_if<ApiError>(&outcome)) return self->send_error(*error);
        self->submit_generation(std::move(std::get<TranslatedRequest>(outcome)));
      });
    });
  }

  // On the preparation pool. Everything a request can cause is an ApiError;
  // anything else is the server's fault (500), and still not a crash.
  std::variant<TranslatedRequest, ApiError> translate(Endpoint endpoint) const {
    try {
      return translate_request(app_->served(), endpoint, request_.body());
    } catch (const ApiError& e) {
      return e;
    } catch (const std::bad_alloc&) {
      return status_error(503, "the server ran out of memory preparing this request");
    } catch (const std::exception& e) {
      return status_error(500, std::string("internal error preparing the request: ") + e.what());
    }
  }

  void submit_generation(TranslatedRequest translated) {
    engine::GenerationRequest gen = std::move(translated.generation);
    ResponseContext ctx = std::move(translated.response);
    warning_ = std::move(translated.warning);
    const bool stream = ctx.stream;
    if (app_->metrics.in_flight.load() >= app_->options.max_queue)
      return send_error(ApiError{
          .status = 429,
          .message = "too many requests in flight (" + std::to_string(app_->options.max_queue) + "); retry shortly",
          .type = "rate_limit_error",
          .param = "",
          .code = "queue_full"});
    ++app_->metrics.in_flight;
    counted_in_flight_ = true;
    // Keeps this session alive while the engine works (events are posted through a weak_ptr).
    keep_alive_ = shared_from_this();
    n_prompt_tokens_ = int64_t(gen.prompt_tokens.size());
    model_name_ = ctx.model;
    builder_.emplace(std::move(ctx));
    last_token_.assign(size_t(gen.n), Clock::time_point{});
    std::weak_ptr<Session> weak = weak_from_this();
    auto executor = stream_.get_executor();
    gen.on_events = [weak, executor] {
      if (auto self = weak.lock()) net::post(executor, [self] { self->pump_events(); });
    };
    handle_ = app_->engine->submit(std::move(gen));
    if (stream) start_stream();
    watch_disconnect();
    timer_.expires_after(std::chrono::milliseconds(int64_t(app_->options.request_timeout_s * 1000)));
    timer_.async_wait([weak](beast::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) {
        if (self->builder_) self->builder_->set_cancel_error(self->timeout_error());
        if (self->handle_) self->handle_->cancel();
      }
    });
    pump_events();
  }

  void start_stream() {
    stream_mode_ = true;
    auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
    res->set(http::field::server, "brioche");
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->set("X-Accel-Buffering", "no");
    if (!app_->options.cors_origin.empty())
      res->set(http::field::access_control_allow_origin, app_->options.cors_origin);
    if (!warning_.empty()) res->set(http::field::warning, warning_);
    res->chunked(true);
    res->keep_alive(request_.keep_alive());
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    writing_ = true;
    http::async_write_header(stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->on_client_gone();
      self->flush_stream();
    });
    outgoing_ += builder_->stream_prelude();
  }

  // A read-readiness wait: if the connection breaks while we generate, cancel.
  // End of input alone is not a disconnect: a client may half-close after
  // its request (shutdown(SHUT_WR)) and still read the answer. A client that
  // closed completely is found by the next write (a stream's next chunk), so
  // a non-streamed request of a vanished client runs to its end, bounded by
  // max_tokens and --timeout.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [weak = weak_from_this()](beast::error_code ec) {
      auto self = weak.lock();
      if (!self || ec || !self->handle_ || self->handle_->finished()) return;
      char byte;
      ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        self->on_client_gone();
      else if (n < 0)
        self->watch_disconnect();  // spurious wake-up
      // n == 0: half-closed, answer anyway. n > 0: a pipelined request; it is read after this response.
    });
  }

  void on_client_gone() {
    client_gone_ = true;
    if (handle_ && !handle_->finished()) handle_->cancel();
  }

  void pump_events() {
    if (!handle_) return;
    auto now = Clock::now();
    for (engine::GenerationEvent& e : handle_->drain()) {
      if (!e.tokens.empty() && e.choice < int(last_token_.size())) {
        Clock::time_point& last = last_token_[size_t(e.choice)];
        if (last == Clock::time_point{})
          app_->metrics.ttft_seconds.observe(std::chrono::duration<double>(now - started_).count());
        else
          app_->metrics.inter_token_seconds.observe(std::chrono::duration<double>(now - last).count());
        last = now;
      }
      std::string text = builder_->on_event(e);
      if (stream_mode_) outgoing_ += text;
    }
    // Finishing counts the request in the metrics before its last bytes go
    // out (asio may write them inside the initiating call): a client that
    // reads /metrics right after the stream ends sees this request.
    if (builder_->done() && !finished_) return finish_generation();
    if (stream_mode_) flush_stream();
  }

  void flush_stream() {
    if (writing_ || client_gone_) return;
    if (outgoing_.empty()) {
      if (finished_ && !last_chunk_sent_) {
        last_chunk_sent_ = true;
        writing_ = true;
        net::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
          self->writing_ = false;
          if (ec || !self->request_.keep_alive()) {
            beast::error_code ignored;
            self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
            return;
          }
          self->reset_generation();
          self->do_read();
        });
      }
      return;
    }
    auto data = std::make_shared<std::string>(std::move(outgoing_));
    outgoing_.clear();
    writing_ = true;
    net::async_write(stream_, http::make_chunk(net::buffer(*data)),
                     [self = shared_from_this(), data](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->on_client_gone();
                       self->flush_stream();
                     });
  }

  void finish_generation() {
    finished_ = true;
    std::shared_ptr<Session> self = std::move(keep_alive_);  // released when this call returns
    timer_.cancel();
    if (counted_in_flight_) {
      --app_->metrics.in_flight;
      counted_in_flight_ = false;
    }
    app_->metrics.add_tokens(model_name_, n_prompt_tokens_, builder_->generated_tokens());
    app_->metrics.request_seconds.observe(std::chrono::duration<double>(Clock::now() - started_).count());
    if (builder_->cancelled()) ++app_->metrics.cancelled_requests;
    if (stream_mode_) {
      // The stream itself went out as 200; the metric records how it ended.
      app_->metrics.count_request(endpoint_, builder_->cancelled()   ? builder_->cancel_error().status
                                             : builder_->any_error() ? 500
                                                                     : 200);
      flush_stream();
      return;
    }
    if (client_gone_) return;
    // Errors also end this generation: a keep-alive connection's next
    // request must start from a clean session (not `finished_`).
    if (builder_->cancelled() || builder_->any_error()) {
      ApiError error =
          builder_->cancelled()
              ? builder_->cancel_error()
              : ApiError{.status = 500, .message = builder_->error(), .type = "server_error", .param = "", .code = ""};
      reset_generation();
      return send_error(error);
    }
    app_->metrics.count_request(endpoint_, 200);
    json body = builder_->final_body();
    reset_generation();
    send_json(200, body);
  }

  void reset_generation() {
    handle_.reset();
    builder_.reset();
    stream_mode_ = finished_ = last_chunk_sent_ = client_gone_ = false;
    outgoing_.clear();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::shared_ptr<App> app_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::string endpoint_;
  bool head_ = false;  // this request is a HEAD: send() drops the body
  Clock::time_point started_;
  net::steady_timer timer_;

  std::shared_ptr<engine::RequestHandle> handle_;
  std::optional<ResponseBuilder> builder_;
  std::vector<Clock::time_point> last_token_;
  std::string outgoing_;
  int64_t n_prompt_tokens_ = 0;
  std::string model_name_;  // the base model's id or the adapter's the request named
  std::string warning_;     // structured output degraded: the `Warning` header
  bool stream_mode_ = false, writing_ = false, finished_ = false, last_chunk_sent_ = false;
  bool client_gone_ = false, counted_in_flight_ = false;
  std::shared_ptr<Session> keep_alive_;
};

std::string model_stem(const std::string& path) {
  std::filesystem::path p(path);
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();
  for (const char* ext : {".gguf", ".safetensors"})
    if (name.size() > strlen(ext) && name.compare(name.size() - strlen(ext), strlen(ext), ext) == 0)
      name.resize(name.size() - strlen(ext));
  return name.empty() ? "brioche" : name;
}

}  // namespace

App::App(std::shared_ptr<engine::Engine> eng, ServerOptions opts) : engine(std::move(eng)), options(std::move(opts)) {
  model_id = !options.model_name.empty() ? options.model_name : model_stem(options.engine.model_path);
  std::string source, bos, eos;
  if (engine->model()) source = engine->model()->chat_template();
  if (auto tok = engine->tokenizer()) {
    if (tok->bos_id() >= 0) bos = tok->token_text(tok->bos_id());
    if (tok->eos_id() >= 0) eos = tok->token_text(tok->eos_id());
  }
  prompter = std::make_unique<ChatPrompter>(source, bos, eos);
  structured = std::make_unique<StructuredOutputCompiler>(
      *engine, StructuredOutputOptions{.grammar_cache_bytes = options.grammar_cache_mb << 20});
  if (!options.web_dir.empty()) web_root = resolve_web_root(options.web_dir);
  adapters = std::make_unique<AdapterRegistry>(options.adapters,
                                               engine->model() ? engine->model()->device() : Device::CPU, model_id);
  if (!options.jobs.data_dir.empty() && engine->model() && engine->tokenizer()) {
    const std::shared_ptr<const tokenizer::Tokenizer> tok = engine->tokenizer();
    std::error_code ec;
    int64_t weights_bytes = 0;
    if (std::filesystem::is_directory(options.engine.model_path, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(options.engine.model_path, ec))
        if (e.is_regular_file(ec)) weights_bytes += int64_t(e.file_size(ec));
    } else {
      weights_bytes = int64_t(std::filesystem::file_size(options.engine.model_path, ec));
    }
    JobsModel jobs_model{.id = model_id,
                         .path = options.engine.model_path,
                         .text = {.tokenizer = tok.get(), .render = train::make_chat_renderer(source, *tok)},
                         .shape = {.config = engine->model()->config(), .weights_bytes = weights_bytes}};
    try {
      jobs = std::make_unique<JobsApi>(options.jobs, std::move(jobs_model), adapters.get());
    } catch (const std::exception& e) {  // the server still serves models; only training is off
      std::fprintf(stderr, "brioche serve: the files and fine-tuning jobs API is off: %s\n",
                   printable(e.what()).c_str());
    }
  }
  if (!prompter->template_problem().empty() && !options.quiet)
    std::fprintf(stderr, "brioche serve: the model's chat template is not usable (%s); using the plain chat format\n",
                 printable(prompter->template_problem()).c_str());
  tool_syntax = prompter->has_template() ? tool_syntax_for_template(source)
                                         : ToolSyntax::Hermes;  // the plain format documents Hermes calls
}

void App::start() {
  // Many idle streaming clients need many descriptors.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  tcp::endpoint endpoint(net::ip::make_address(options.host), options.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
  if (jobs) jobs->start();
  do_accept();
  int n = std::max(1, options.io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc.run(); });
}

void App::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      std::make_shared<Session>(std::move(socket), self)->start();
    }
    self->do_accept();
  });
}

void App::begin_shutdown() {
  if (shutdown_started_.exchange(true)) return;
  shutting_down = true;
  net::post(ioc, [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
  });
  if (jobs) jobs->stop();  // trainers stop at a checkpoint; their jobs become interrupted
  // Let in-flight requests finish, then cancel what is left.
  auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(options.shutdown_grace_s * 1000));
  while (metrics.in_flight.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine->shutdown();  // cancels the rest; their sessions answer and close
  auto drain_deadline = Clock::now() + std::chrono::seconds(2);
  while (metrics.in_flight.load() > 0 && Clock::now() < drain_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // last writes
  prepare_pool.stop();
  prepare_pool.join();
  ioc.stop();
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  stopped_cv_.notify_all();
}

void App::wait() {
  std::unique_lock lock(mutex_);
  stopped_cv_.wait(lock, [&] { return stopped_; });
}

Server::Server(std::shared_ptr<engine::Engine> engine, ServerOptions options)
    : app_(std::make_shared<App>(std::move(engine), std::move(options))) {
  app_->start();
}

Server::~Server() { shutdown(); }
uint16_t Server::port() const { return app_->port(); }
bool Server::jobs_enabled() const { return app_->jobs != nullptr; }
void Server::shutdown() { app_->begin_shutdown(); }
void Server::wait() { app_->wait(); }

int run_server(const ServerOptions& options) {
  std::shared_ptr<engine::Engine> engine;
  try {
    engine = engine::Engine::load(options.engine);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "brioche serve: cannot load %s: %s\n", options.engine.model_path.c_str(),
                 printable(e.what()).c_str());
    return 1;
  }
  return serve_until_signal(std::move(engine), options);
}

int serve_until_signal(std::shared_ptr<engine::Engine> engine, const ServerOptions& options) {
  // Signals: block them in every thread, and wait for one in a dedicated thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::unique_ptr<Server> server;
  try {
    server = std::make_unique<Server>(engine, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "brioche serve: cannot start (%s:%u): %s\n", options.host.c_str(), unsigned(options.port),
                 printable(e.what()).c_str());
    return 1;
  }
  if (!options.quiet) {
    std::string url = "http://" + options.host + ":" + std::to_string(server->port());
    std::printf("brioche serve: %s on %s (context %d)\n", options.engine.model_path.c_str(), url.c_str(),
                engine->context_length());
    const engine::EngineStats stats = engine->stats();
    const int32_t block = options.engine.kv.block_size;
    std::printf("  KV cache: %d blocks of %d tokens (%lld tokens; %s), up to %d tokens per step\n",
                stats.kv_blocks_total, block, (long long)stats.kv_blocks_total * block,
                options.engine.kv.kv_memory_bytes != 0                         ? "--kv-mb"
                : engine->model() && engine->model()->device() == Device::CUDA ? "fitted to the GPU's free memory"
                                                                               : "the CPU's default of 256 MiB",
                options.engine.scheduler.max_batch_tokens);
    if (stats.kv_window_blocks_total > 0)
      std::printf("  sliding-window layers: %d blocks of their own, freed once out of the window (docs/server.md)\n",
                  stats.kv_window_blocks_total);
    if (server->jobs_enabled()) {
      std::printf("  fine-tuning jobs: %s (docs/jobs-api.md)\n", options.jobs.data_dir.c_str());
    }
    std::printf(
        "  curl %s/v1/chat/completions -H 'Content-Type: application/json'%s \\\n"
        "    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'\n",
        url.c_str(), options.api_key.empty() ? "" : " -H 'Authorization: Bearer $KEY'");
    std::fflush(stdout);
  }
  int sig = 0;
  sigwait(&signals, &sig);
  if (!options.quiet)
    std::fprintf(stderr, "brioche serve: %s, finishing in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server->shutdown();
  server.reset();
  engine.reset();
  return 0;
}

}  // namespace brioche::server
