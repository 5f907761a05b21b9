// The LoRA adapters a server offers as models beside its base model
// (--lora NAME=DIR, --lora-dir, /v1/load_lora_adapter).
//
// Every adapter keeps a host copy of its factors; at most max_resident of
// them also have a copy on the model's device, least recently used evicted
// first (a CPU model's host copy is its device copy). A request takes a
// shared pointer to the device copy and holds it until it ends, so evicting
// or unloading an adapter never pulls factors from under a running request:
// they are freed when its last request finishes.
//
// Reading is the caller's (AdapterReader: PEFT files through
// train/adapter_io.h, which the server layer does not link); the registry
// decides which paths may be read: runtime loads only from inside lora_dir,
// resolved with symlinks followed, as the static files are. (What lora_dir
// itself holds at start-up is the operator's, links included.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/served_adapter.h"

namespace brioche::server {

// Reads the adapter at `dir` for the served model, factors on the host;
// throws brioche::Error naming the file and what is wrong (a missing
// tensor, a shape, a rank above max_rank).
using AdapterReader = std::function<std::shared_ptr<model::ServedAdapter>(const std::string& dir, int max_rank)>;

struct AdapterOptions {
  std::vector<std::pair<std::string, std::string>> startup;  // --lora NAME=DIR
  std::string lora_dir;  // --lora-dir: its adapter folders and .gguf files are served; runtime loads must lie inside it
  bool allow_runtime = false;  // --allow-runtime-lora: /v1/load_lora_adapter and /v1/unload_lora_adapter
  int max_resident = 8;        // --max-loras: adapters with factors on the device at once
  int max_rank = 64;           // --max-lora-rank
  AdapterReader read;          // set by whoever links the adapter reader (the CLI)
};

struct AdapterInfo {
  std::string name;
  int32_t rank = 0;
  size_t bytes = 0;
  bool resident = false;  // factors on the device now
  std::string path;       // the PEFT folder or GGUF LoRA file it was read from
};

// The largest adapter file GET /v1/models/{id}/files/{name} sends (read
// whole into memory; a rank-64 adapter on every projection of an 8B model
// is about 0.7 GB in f32).
inline constexpr size_t kMaxAdapterDownloadBytes = size_t{2} << 30;

// One file of an adapter, as it can be downloaded.
struct AdapterFile {
  std::string name;  // a plain file name (no folder)
  uint64_t bytes = 0;
};

// The files that make up the adapter at `path`: a GGUF LoRA file itself, or
// a PEFT folder's regular files at its top level (adapter_config.json,
// adapter_model.safetensors, ...; folders such as checkpoints/ and links
// are left out, so nothing outside the folder is ever offered; so are names
// with characters other than letters, digits, '.', '_' and '-', which then
// go into URLs and headers as they are).
std::vector<AdapterFile> adapter_files(const std::string& path);
// The content of `file`, one of adapter_files(path); throws ApiError 404 for
// any other name and 413 past max_bytes.
std::string read_adapter_file(const std::string& path, const std::string& file, size_t max_bytes);

class AdapterRegistry {
 public:
  // Loads options.startup and every adapter of options.lora_dir (PEFT
  // folders named by the folder, GGUF LoRA files by their stem); throws
  // brioche::Error on the first that fails.
  AdapterRegistry(AdapterOptions options, Device device, std::string base_name);

  // The device copy of `name` (uploaded now if evicted), or null when no
  // adapter has that name.
  std::shared_ptr<const model::ServedAdapter> acquire(const std::string& name);

  // Runtime loading. `path` is resolved against lora_dir (relative paths
  // inside it); throws ApiError: 400 for a bad name or adapter file, 403 for
  // a path outside lora_dir, 409 for a name in use.
  AdapterInfo load(const std::string& name, const std::string& path);
  // Throws ApiError 404 when no adapter has that name.
  void unload(const std::string& name);
  // Serves an adapter the server itself wrote (a finished fine-tuning job's,
  // under its data directory): no lora_dir boundary; throws brioche::Error.
  AdapterInfo publish(const std::string& name, const std::string& dir) { return add(name, dir); }

  std::vector<AdapterInfo> list() const;
  bool runtime_allowed() const { return options_.allow_runtime; }
  const AdapterOptions& options() const { return options_; }

 private:
  struct Entry {
    std::shared_ptr<const model::ServedAdapter> host;
    std::shared_ptr<const model::ServedAdapter> device;  // null when evicted
    std::list<std::string>::iterator lru;                // into lru_ when resident
  };
  // Reads `dir` and registers it; errors as brioche::Error.
  AdapterInfo add(const std::string& name, const std::string& dir);
  void check_name(const std::string& name) const;
  std::filesystem::path inside_lora_dir(const std::string& path) const;
  void make_resident(const std::string& name, Entry& entry);
  AdapterInfo info(const std::string& name, const Entry& entry) const;

  AdapterOptions options_;
  Device device_;
  std::string base_name_;
  std::filesystem::path lora_root_;  // resolved lora_dir; empty without one
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // resident names, most recent first
  uint64_t next_id_ = 1;
};

}  // namespace brioche::server
