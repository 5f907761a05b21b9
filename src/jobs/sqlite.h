// A small RAII layer over the SQLite C API: one connection, prepared
// statements with bound parameters, rows read by column index.
//
//   Database db("/path/jobs.sqlite3");
//   Statement st = db.prepare("SELECT id, bytes FROM files WHERE purpose = ?");
//   st.bind(1, "fine-tune");
//   while (st.step()) use(st.text(0), st.int64(1));
//
// Errors throw brioche::Error with SQLite's message and the statement's SQL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace brioche::jobs {

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;

  // Parameters count from 1, as in SQLite.
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, int64_t(value)); }
  Statement& bind(int index, double value);
  Statement& bind_null(int index);
  Statement& bind_optional(int index, const std::optional<std::string>& text);

  // Runs to the next row: true when one is ready, false when done.
  bool step();
  // Runs a statement that returns no rows.
  void run();

  // Columns count from 0.
  std::string text(int column) const;
  std::optional<std::string> optional_text(int column) const;
  int64_t int64(int column) const;
  std::optional<int64_t> optional_int64(int column) const;
  double real(int column) const;
  bool is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Database {
 public:
  // Opens (creating) the file; WAL journal, foreign keys on, a busy timeout.
  explicit Database(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  Statement prepare(std::string_view sql) { return Statement(db_, sql); }
  // Runs one or more statements without parameters.
  void exec(std::string_view sql);
  int64_t last_insert_rowid() const;
  const std::string& path() const { return path_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back when destroyed uncommitted.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace brioche::jobs
