#include "server/adapter_registry.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "formats/regular_file.h"
#include "server/api_error.h"

namespace brioche::server {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxNameBytes = 256;

// A PEFT adapter folder, or a GGUF LoRA file (llama.cpp's).
bool is_adapter(const fs::directory_entry& e) {
  std::error_code ec;
  if (e.is_directory(ec)) return fs::is_regular_file(e.path() / "adapter_config.json", ec);
  return e.is_regular_file(ec) && e.path().extension() == ".gguf";
}

}  // namespace

AdapterRegistry::AdapterRegistry(AdapterOptions options, Device device, std::string base_name)
    : options_(std::move(options)), device_(device), base_name_(std::move(base_name)) {
  BRIOCHE_CHECK(options_.max_resident >= 1, "--max-loras: expected at least 1, got ", options_.max_resident);
  BRIOCHE_CHECK(!options_.allow_runtime || !options_.lora_dir.empty(),
                "--allow-runtime-lora needs --lora-dir: the folder runtime loads may read adapters from");
  if (!options_.startup.empty() || !options_.lora_dir.empty() || options_.allow_runtime)
    BRIOCHE_CHECK(options_.read != nullptr, "adapters: no adapter reader was given to the server");
  // Start-up loads name the flag that asked for them.
  auto add_at_start = [&](const std::string& name, const std::string& path, const std::string& flag) {
    try {
      add(name, path);
    } catch (const Error& e) {
      throw Error(flag + ": adapter '" + name + "' (" + path + "): " + e.what());
    }
  };
  for (const auto& [name, dir] : options_.startup) add_at_start(name, dir, "--lora");
  if (options_.lora_dir.empty()) return;
  std::error_code ec;
  lora_root_ = fs::canonical(options_.lora_dir, ec);
  BRIOCHE_CHECK(!ec && fs::is_directory(lora_root_), "--lora-dir ", options_.lora_dir, " is not a directory");
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::directory_iterator(lora_root_))
    if (is_adapter(e)) found.push_back(e.path());
  std::sort(found.begin(), found.end());
  // What the folder holds is the operator's choice, links to adapters
  // elsewhere included; only runtime loads are held to its boundary.
  for (const fs::path& f : found) {
    const std::string name = f.extension() == ".gguf" ? f.stem().string() : f.filename().string();
    if (!entries_.count(name)) add_at_start(name, f.string(), "--lora-dir");
  }
}

void AdapterRegistry::check_name(const std::string& name) const {
  BRIOCHE_CHECK(!name.empty() && name.size() <= kMaxNameBytes, "adapter name: expected 1 to ", kMaxNameBytes,
                " bytes, got ", name.size());
  for (unsigned char ch : name)
    BRIOCHE_CHECK(ch > 0x20 && ch != 0x7f, "adapter name '", name, "': no spaces or control characters allowed");
  BRIOCHE_CHECK(name != base_name_, "adapter name '", name, "' is the base model's");
}

fs::path AdapterRegistry::inside_lora_dir(const std::string& path) const {
  fs::path p(path);
  if (p.is_relative()) p = lora_root_ / p;
  std::error_code ec;
  const fs::path resolved = fs::canonical(p, ec);
  if (ec) throw status_error(400, "adapter path '" + path + "' does not exist");
  auto [root_end, _] = std::mismatch(lora_root_.begin(), lora_root_.end(), resolved.begin(), resolved.end());
  if (root_end != lora_root_.end() || resolved == lora_root_)
    throw status_error(403, "adapter path '" + path + "' is outside --lora-dir " + lora_root_.string());
  return resolved;
}

AdapterInfo AdapterRegistry::add(const std::string& name, const std::string& dir) {
  check_name(name);
  {
    std::lock_guard lock(mutex_);
    BRIOCHE_CHECK(!entries_.count(name), "an adapter named '", name, "' is already loaded");
  }
  // Read outside the lock: files can be large, and requests keep acquiring.
  std::shared_ptr<model::ServedAdapter> host = options_.read(dir, options_.max_rank);
  host->name = name;
  host->path = dir;
  std::lock_guard lock(mutex_);
  BRIOCHE_CHECK(!entries_.count(name), "an adapter named '", name, "' is already loaded");
  // Ids start the prefix cache's hash chains: distinct per load, never 0 (the base).
  host->id = 0x9e3779b97f4a7c15ull * next_id_++ ^ 0xa0761d6478bd642full;
  Entry& entry = entries_[name];
  entry.host = host;
  make_resident(name, entry);
  return info(name, entry);
}

void AdapterRegistry::make_resident(const std::string& name, Entry& entry) {
  if (entry.device) {
    lru_.splice(lru_.begin(), lru_, entry.lru);
    return;
  }
  entry.device = device_ == Device::CPU ? entry.host : model::copy_to_device(*entry.host, device_);
  lru_.push_front(name);
  entry.lru = lru_.begin();
  while (int(lru_.size()) > options_.max_resident) {
    Entry& evicted = entries_.at(lru_.back());
    evicted.device.reset();  // running requests keep their own pointer
    lru_.pop_back();
  }
}

std::shared_ptr<const model::ServedAdapter> AdapterRegistry::acquire(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  make_resident(name, it->second);
  return it->second.device;
}

AdapterInfo AdapterRegistry::load(const std::string& name, const std::string& path) {
  if (lora_root_.empty()) throw status_error(403, "runtime adapter loading needs --lora-dir");
  const fs::path dir = inside_lora_dir(path);
  {
    std::lock_guard lock(mutex_);
    if (entries_.count(name))
      throw ApiError{.status = 409,
                     .message = "an adapter named '" + name + "' is already loaded; unload it first",
                     .type = "invalid_request_error",
                     .param = "lora_name",
                     .code = "adapter_exists"};
  }
  try {
    return add(name, dir.string());
  } catch (const Error& e) {
    throw ApiError{.status = 400,
                   .message = e.what(),
                   .type = "invalid_request_error",
                   .param = "lora_path",
                   .code = "invalid_adapter"};
  }
}

void AdapterRegistry::unload(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw ApiError{.status = 404,
                   .message = "no adapter named '" + name + "' is loaded",
                   .type = "invalid_request_error",
                   .param = "lora_name",
                   .code = "model_not_found"};
  if (it->second.device) lru_.erase(it->second.lru);
  entries_.erase(it);
}

AdapterInfo AdapterRegistry::info(const std::string& name, const Entry& entry) const {
  return {.name = name,
          .rank = entry.host->rank,
          .bytes = entry.host->bytes(),
          .resident = entry.device != nullptr,
          .path = entry.host->path};
}

std::vector<AdapterFile> adapter_files(const std::string& path) {
  std::vector<AdapterFile> out;
  std::error_code ec;
  auto plain = [](const std::string& name) {
    return !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
  };
  if (fs::is_regular_file(fs::symlink_status(path, ec))) {
    const std::string name = fs::path(path).filename().string();
    if (plain(name)) out.push_back({name, static_cast<uint64_t>(fs::file_size(path, ec))});
    return out;
  }
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    if (!e.is_regular_file(ec) || e.is_symlink(ec) || !plain(e.path().filename().string())) continue;
    out.push_back({e.path().filename().string(), static_cast<uint64_t>(e.file_size(ec))});
  }
  std::sort(out.begin(), out.end(), [](const AdapterFile& a, const AdapterFile& b) { return a.name < b.name; });
  return out;
}

std::string read_adapter_file(const std::string& path, const std::string& file, size_t max_bytes) {
  for (const AdapterFile& f : adapter_files(path)) {
    if (f.name != file) continue;
    if (f.bytes > max_bytes)
      throw ApiError{.status = 413,
                     .message = "adapter file '" + file + "' has " + std::to_string(f.bytes) +
                                " bytes, more than the " + std::to_string(max_bytes) + " this route sends",
                     .type = "invalid_request_error",
                     .param = "file",
                     .code = "file_too_large"};
    const fs::path full = fs::is_regular_file(fs::symlink_status(path)) ? fs::path(path) : fs::path(path) / file;
    std::optional<std::string> content = formats::read_regular_file_if_present(full.string(), max_bytes);
    if (content) return std::move(*content);
    break;
  }
  throw ApiError{.status = 404,
                 .message = "the adapter has no file named '" + file + "' (GET .../files lists them)",
                 .type = "invalid_request_error",
                 .param = "file",
                 .code = "not_found"};
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, entry] : entries_) out.push_back(info(name, entry));
  return out;
}

}  // namespace brioche::server
