// The OpenAI-compatible HTTP server (`brioche serve`).
//
//   ServerOptions opts{.engine = {.model_path = path}, .port = 8080};
//   return run_server(opts);  // until SIGINT/SIGTERM
//
// Event-driven: an asio io_context served by a few threads; every connection
// reads, routes and writes asynchronously, and a generation's events (from the
// engine thread) are posted to the connection's strand and written as they
// arrive (SSE for streams). Routes: POST /v1/chat/completions,
// /v1/completions, /v1/responses; GET /v1/models, /v1/models/{id}, /health,
// /metrics; /v1/files and /v1/fine_tuning/jobs (server/jobs_api.h, with --data-dir);
// POST /v1/load_lora_adapter, /v1/unload_lora_adapter (with
// --allow-runtime-lora); GET / and other paths outside /v1/ serve the web
// UI built into the binary (or --web-dir's files first).
// A request whose `model` names a LoRA adapter runs with it, unmerged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/adapter_registry.h"
#include "server/jobs_api.h"

namespace brioche::server {

struct ServerOptions {
  engine::EngineOptions engine;
  std::string host = "127.0.0.1";
  uint16_t port = 8080;    // 0: any free port (see Server::port())
  std::string api_key;     // non-empty: require "Authorization: Bearer <key>" on /v1/*
  std::string model_name;  // id reported by /v1/models; default: the model file's stem
  int io_threads = 2;
  size_t grammar_cache_mb = 256;     // compiled grammars kept (LRU by bytes)
  int prepare_threads = 2;           // translate requests (template, tokenise, compile grammars) off the I/O threads
  int max_queue = 256;               // generation requests in flight before 429
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  double request_timeout_s = 600;    // per generation request
  double shutdown_grace_s = 10;      // in-flight requests may finish this long after SIGTERM
  std::string cors_origin = "*";
  std::string
      web_dir;  // UI files served at / before the built-in ones (regular files inside it only; no API key needed)
  AdapterOptions adapters;  // LoRA adapters served as models beside the base (server/adapter_registry.h)
  JobsOptions jobs;         // files and fine-tuning jobs (docs/jobs-api.md); data_dir "" = off
  bool quiet = false;
};

class App;

// A running server; the destructor stops it.
class Server {
 public:
  // Takes an already built engine (tests use fakes); starts listening and the IO threads.
  Server(std::shared_ptr<engine::Engine> engine, ServerOptions options);
  ~Server();
  uint16_t port() const;
  // Whether the files and fine-tuning jobs API is on (--data-dir, not held by another server).
  bool jobs_enabled() const;
  // Graceful: stop accepting, answer new requests with 503, let in-flight
  // requests finish for up to shutdown_grace_s, then cancel the rest.
  void shutdown();
  // Blocks until shutdown() completed (e.g. from a signal).
  void wait();

 private:
  std::shared_ptr<App> app_;
};

// Loads the model, serves until SIGINT/SIGTERM, prints the URL and a curl
// example. Returns a process exit code.
int run_server(const ServerOptions& options);
// The same with an engine the caller loaded.
int serve_until_signal(std::shared_ptr<engine::Engine> engine, const ServerOptions& options);

}  // namespace brioche::server
