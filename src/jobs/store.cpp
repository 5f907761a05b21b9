#include "jobs/store.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace brioche::jobs {

namespace {

using json = nlohmann::json;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS files (
  id TEXT PRIMARY KEY, filename TEXT NOT NULL, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL,
  purpose TEXT NOT NULL, kind TEXT NOT NULL, rows INTEGER NOT NULL, path TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, finished_at INTEGER, status TEXT NOT NULL,
  model TEXT NOT NULL, training_file TEXT NOT NULL, validation_file TEXT, suffix TEXT NOT NULL,
  seed INTEGER NOT NULL, method TEXT NOT NULL, train_config TEXT NOT NULL, method_type TEXT NOT NULL,
  fine_tuned_model TEXT, served_models TEXT NOT NULL, error TEXT NOT NULL,
  step INTEGER NOT NULL, total_steps INTEGER NOT NULL, trained_tokens INTEGER NOT NULL,
  estimated_memory_bytes INTEGER NOT NULL, best_margin_step INTEGER, pid INTEGER NOT NULL,
  log_offset INTEGER NOT NULL, directory TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, created_at INTEGER NOT NULL,
  level TEXT NOT NULL, type TEXT NOT NULL, message TEXT NOT NULL, data TEXT);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS metrics (
  job_id TEXT NOT NULL, kind TEXT NOT NULL, step INTEGER NOT NULL, row TEXT NOT NULL,
  PRIMARY KEY (job_id, kind, step));
)sql";

constexpr const char* kJobColumns =
    "id, created_at, finished_at, status, model, training_file, validation_file, suffix, seed, method, train_config, "
    "method_type, fine_tuned_model, served_models, error, step, total_steps, trained_tokens, estimated_memory_bytes, "
    "best_margin_step, pid, log_offset, directory";

constexpr const char* kFileColumns = "id, filename, bytes, created_at, purpose, kind, rows, path";

FileRecord read_file(Statement& st) {
  return FileRecord{.id = st.text(0),
                    .filename = st.text(1),
                    .bytes = st.int64(2),
                    .created_at = st.int64(3),
                    .purpose = st.text(4),
                    .kind = st.text(5),
                    .rows = st.int64(6),
                    .path = st.text(7)};
}

EventRecord read_event(Statement& st) {
  EventRecord e{.seq = st.int64(0),
                .job_id = st.text(1),
                .created_at = st.int64(2),
                .level = st.text(3),
                .type = st.text(4),
                .message = st.text(5)};
  if (auto data = st.optional_text(6)) e.data = json::parse(*data);
  return e;
}

// Lists page by the insertion order (rowid for files, seq for jobs), which
// is also creation order; ids are random.
int64_t order_of(Database& db, const char* table, const char* column, const std::string& id) {
  Statement st = db.prepare(std::string("SELECT ") + column + " FROM " + table + " WHERE id = ?");
  st.bind(1, id);
  return st.step() ? st.int64(0) : -1;
}

}  // namespace

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
  return prefix + "-" + hex;
}

JobStore::JobStore(const std::string& path) : db_(path) { db_.exec(kSchema); }

void JobStore::add_file(const FileRecord& f) {
  std::lock_guard lock(mutex_);
  db_.prepare("INSERT INTO files (id, filename, bytes, created_at, purpose, kind, rows, path) VALUES (?,?,?,?,?,?,?,?)")
      .bind(1, f.id)
      .bind(2, f.filename)
      .bind(3, f.bytes)
      .bind(4, f.created_at)
      .bind(5, f.purpose)
      .bind(6, f.kind)
      .bind(7, f.rows)
      .bind(8, f.path)
      .run();
}

std::optional<FileRecord> JobStore::file(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(std::string("SELECT ") + kFileColumns + " FROM files WHERE id = ?");
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_file(st);
}

Page<FileRecord> JobStore::files(const std::string& purpose, const std::string& after, int limit, bool ascending) {
  std::lock_guard lock(mutex_);
  int64_t cursor = after.empty() ? (ascending ? -1 : INT64_MAX) : order_of(db_, "files", "rowid", after);
  if (cursor < 0 && !after.empty()) return {};
  std::string sql = std::string("SELECT ") + kFileColumns + " FROM files WHERE (? = '' OR purpose = ?) AND rowid " +
                    (ascending ? "> ?" : "< ?") + " ORDER BY rowid " + (ascending ? "ASC" : "DESC") + " LIMIT ?";
  Statement st = db_.prepare(sql);
  st.bind(1, purpose).bind(2, purpose).bind(3, cursor).bind(4, int64_t(limit) + 1);
  Page<FileRecord> page;
  while (st.step()) page.items.push_back(read_file(st));
  if (int(page.items.size()) > limit) page.items.pop_back(), page.has_more = true;
  return page;
}

bool JobStore::delete_file(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare("DELETE FROM files WHERE id = ? RETURNING id");
  st.bind(1, id);
  const bool found = st.step();
  st.run();
  return found;
}

void JobStore::add_job(const JobRecord& j) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(std::string("INSERT INTO jobs (") + kJobColumns +
                             ", seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?, "
                             "(SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs))");
  st.bind(1, j.id).bind(2, j.created_at);
  j.finished_at ? st.bind(3, *j.finished_at) : st.bind_null(3);
  st.bind(4, j.status)
      .bind(5, j.model)
      .bind(6, j.training_file)
      .bind_optional(7, j.validation_file)
      .bind(8, j.suffix)
      .bind(9, j.seed)
      .bind(10, j.method.dump())
      .bind(11, j.train_config.dump())
      .bind(12, j.method_type)
      .bind_optional(13, j.fine_tuned_model)
      .bind(14, j.served_models.dump())
      .bind(15, j.error.dump())
      .bind(16, j.step)
      .bind(17, j.total_steps)
      .bind(18, j.trained_tokens)
      .bind(19, j.estimated_memory_bytes);
  j.best_margin_step ? st.bind(20, *j.best_margin_step) : st.bind_null(20);
  st.bind(21, j.pid).bind(22, j.log_offset).bind(23, j.directory).run();
}

JobRecord JobStore::read_job(Statement& st) {
  JobRecord j;
  j.id = st.text(0);
  j.created_at = st.int64(1);
  j.finished_at = st.optional_int64(2);
  j.status = st.text(3);
  j.model = st.text(4);
  j.training_file = st.text(5);
  j.validation_file = st.optional_text(6);
  j.suffix = st.text(7);
  j.seed = st.int64(8);
  j.method = json::parse(st.text(9));
  j.train_config = json::parse(st.text(10));
  j.method_type = st.text(11);
  j.fine_tuned_model = st.optional_text(12);
  j.served_models = json::parse(st.text(13));
  j.error = json::parse(st.text(14));
  j.step = st.int64(15);
  j.total_steps = st.int64(16);
  j.trained_tokens = st.int64(17);
  j.estimated_memory_bytes = st.int64(18);
  j.best_margin_step = st.optional_int64(19);
  j.pid = st.int64(20);
  j.log_offset = st.int64(21);
  j.directory = st.text(22);
  return j;
}

std::optional<JobRecord> JobStore::job(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?");
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_job(st);
}

Page<JobRecord> JobStore::jobs(const std::string& after, int limit) {
  std::lock_guard lock(mutex_);
  int64_t cursor = after.empty() ? INT64_MAX : order_of(db_, "jobs", "seq", after);
  if (cursor < 0) return {};
  Statement st =
      db_.prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE seq < ? ORDER BY seq DESC LIMIT ?");
  st.bind(1, cursor).bind(2, int64_t(limit) + 1);
  Page<JobRecord> page;
  while (st.step()) page.items.push_back(read_job(st));
  if (int(page.items.size()) > limit) page.items.pop_back(), page.has_more = true;
  return page;
}

std::vector<JobRecord> JobStore::jobs_with_status(const std::string& s) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE status = ? ORDER BY seq ASC");
  st.bind(1, s);
  std::vector<JobRecord> out;
  while (st.step()) out.push_back(read_job(st));
  return out;
}

int64_t JobStore::count_with_status(const std::string& s) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare("SELECT COUNT(*) FROM jobs WHERE status = ?");
  st.bind(1, s);
  st.step();
  return st.int64(0);
}

bool JobStore::transition(const std::string& id, const std::vector<std::string>& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  for (const std::string& f : from) {
    Statement st = db_.prepare("UPDATE jobs SET status = ? WHERE id = ? AND status = ? RETURNING id");
    st.bind(1, to).bind(2, id).bind(3, f);
    const bool changed = st.step();
    st.run();
    if (changed) return true;
  }
  return false;
}

void JobStore::set_finished(const std::string& id, int64_t finished_at) {
  std::lock_guard lock(mutex_);
  db_.prepare("UPDATE jobs SET finished_at = ? WHERE id = ?").bind(1, finished_at).bind(2, id).run();
}

void JobStore::set_pid(const std::string& id, int64_t pid) {
  std::lock_guard lock(mutex_);
  db_.prepare("UPDATE jobs SET pid = ? WHERE id = ?").bind(1, pid).bind(2, id).run();
}

void JobStore::set_progress(const std::string& id, int64_t step, int64_t trained_tokens, int64_t log_offset) {
  std::lock_guard lock(mutex_);
  db_.prepare("UPDATE jobs SET step = ?, trained_tokens = ?, log_offset = ? WHERE id = ?")
      .bind(1, step)
      .bind(2, trained_tokens)
      .bind(3, log_offset)
      .bind(4, id)
      .run();
}

void JobStore::set_total_steps(const std::string& id, int64_t total_steps) {
  std::lock_guard lock(mutex_);
  db_.prepare("UPDATE jobs SET total_steps = ? WHERE id = ?").bind(1, total_steps).bind(2, id).run();
}

void JobStore::set_error(const std::string& id, const json& error) {
  std::lock_guard lock(mutex_);
  db_.prepare("UPDATE jobs SET error = ? WHERE id = ?").bind(1, error.dump()).bind(2, id).run();
}

void JobStore::set_result(const std::string& id, const std::optional<std::string>& fine_tuned_model,
                          const json& served_models, std::optional<int64_t> best_margin_step) {
  std::lock_guard lock(mutex_);
  Statement st =
      db_.prepare("UPDATE jobs SET fine_tuned_model = ?, served_models = ?, best_margin_step = ? WHERE id = ?");
  st.bind_optional(1, fine_tuned_model).bind(2, served_models.dump());
  best_margin_step ? st.bind(3, *best_margin_step) : st.bind_null(3);
  st.bind(4, id).run();
}

int64_t JobStore::add_event(const EventRecord& e) {
  std::lock_guard lock(mutex_);
  Statement st =
      db_.prepare("INSERT INTO events (job_id, created_at, level, type, message, data) VALUES (?,?,?,?,?,?)");
  st.bind(1, e.job_id).bind(2, e.created_at).bind(3, e.level).bind(4, e.type).bind(5, e.message);
  e.data.is_null() ? st.bind_null(6) : st.bind(6, e.data.dump());
  st.run();
  return db_.last_insert_rowid();
}

Page<EventRecord> JobStore::events(const std::string& job_id, int64_t before_seq, int limit) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(
      "SELECT seq, job_id, created_at, level, type, message, data FROM events WHERE job_id = ? AND seq < ? "
      "ORDER BY seq DESC LIMIT ?");
  st.bind(1, job_id).bind(2, before_seq > 0 ? before_seq : INT64_MAX).bind(3, int64_t(limit) + 1);
  Page<EventRecord> page;
  while (st.step()) page.items.push_back(read_event(st));
  if (int(page.items.size()) > limit) page.items.pop_back(), page.has_more = true;
  return page;
}

std::vector<EventRecord> JobStore::events_after(const std::string& job_id, int64_t after_seq, int limit) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare(
      "SELECT seq, job_id, created_at, level, type, message, data FROM events WHERE job_id = ? AND seq > ? "
      "ORDER BY seq ASC LIMIT ?");
  st.bind(1, job_id).bind(2, after_seq).bind(3, int64_t(limit));
  std::vector<EventRecord> out;
  while (st.step()) out.push_back(read_event(st));
  return out;
}

void JobStore::put_metric(const std::string& job_id, const MetricRow& row) {
  std::lock_guard lock(mutex_);
  db_.prepare("INSERT OR REPLACE INTO metrics (job_id, kind, step, row) VALUES (?,?,?,?)")
      .bind(1, job_id)
      .bind(2, row.kind)
      .bind(3, row.step)
      .bind(4, row.row.dump())
      .run();
}

std::vector<MetricRow> JobStore::metrics(const std::string& job_id, int64_t after_step) {
  std::lock_guard lock(mutex_);
  // Step rows before the eval row of the same step ('eval' < 'step' alphabetically, hence the CASE).
  Statement st = db_.prepare(
      "SELECT kind, step, row FROM metrics WHERE job_id = ? AND step > ? "
      "ORDER BY step ASC, CASE kind WHEN 'step' THEN 0 ELSE 1 END ASC");
  st.bind(1, job_id).bind(2, after_step);
  std::vector<MetricRow> out;
  while (st.step()) out.push_back({st.text(0), st.int64(1), json::parse(st.text(2))});
  return out;
}

int64_t JobStore::metric_count(const std::string& job_id) {
  std::lock_guard lock(mutex_);
  Statement st = db_.prepare("SELECT COUNT(*) FROM metrics WHERE job_id = ?");
  st.bind(1, job_id);
  st.step();
  return st.int64(0);
}

}  // namespace brioche::jobs
