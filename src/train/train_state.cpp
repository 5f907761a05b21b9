#include "train/train_state.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_limits.h"
#include "formats/file_write.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "ops/device.h"

namespace brioche::train {

namespace {

constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr size_t kMaxStateBytes = size_t(256) << 20;

}  // namespace

bool has_train_state(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / kTrainStateFile, ec);
}

void save_train_state(const std::string& dir, const TrainState& s, const AdamW& optimizer) {
  std::filesystem::create_directories(dir);
  const AdamW::State opt = optimizer.state();
  formats::SafetensorsWriter writer;
  for (auto [name, t] : {std::pair{"m_a", &opt.m_a}, {"v_a", &opt.v_a}, {"m_b", &opt.m_b}, {"v_b", &opt.v_b}})
    writer.add(name, ops::to_device(*t, Device::CPU));
  writer.set_metadata({{"adam_step", std::to_string(opt.t)}, {"producer", "brioche"}});
  writer.write(dir + "/" + kOptimizerFile);

  std::ostringstream rng;
  rng << s.rng;
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["adam_step"] = opt.t;
  j["rng"] = rng.str();
  j["order"] = s.order;
  j["cursor"] = s.cursor;
  j["train_loss_sum"] = s.train_loss_sum;
  j["train_loss_n"] = s.train_loss_n;
  j["tokens_done"] = s.tokens_done;
  j["seconds"] = s.seconds;
  j["evals"] = s.evals;
  j["best_margin"] = s.best_margin;
  j["best_margin_step"] = s.best_margin_step;
  j["metric_for_best"] = s.best_metric_name;
  j["best_metric"] = s.best_metric;
  j["best_metric_step"] = s.best_metric_step;
  j["evals_without_improvement"] = s.evals_without_improvement;
  formats::write_file_atomically(dir + "/" + kTrainStateFile, [&](std::ostream& out) { out << j.dump(1) << "\n"; });
}

TrainState load_train_state(const std::string& dir, AdamW& optimizer, int n_examples) {
  const std::string path = dir + "/" + kTrainStateFile;
  auto text = formats::read_regular_file_if_present(path, kMaxStateBytes);
  BRIOCHE_CHECK(text.has_value(), "cannot read ", path);
  const nlohmann::json j = parse_json_bounded(*text, path);
  TrainState s;
  try {
    s.step = j.at("step").get<int>();
    std::istringstream rng(j.at("rng").get<std::string>());
    rng >> s.rng;
    BRIOCHE_CHECK(!rng.fail(), path, ": \"rng\" is not a generator state");
    s.order = j.at("order").get<std::vector<int>>();
    s.cursor = j.at("cursor").get<size_t>();
    s.train_loss_sum = j.at("train_loss_sum").get<double>();
    s.train_loss_n = j.at("train_loss_n").get<int>();
    s.tokens_done = j.at("tokens_done").get<int64_t>();
    s.seconds = j.at("seconds").get<double>();
    s.evals = j.at("evals");
    s.best_margin = j.at("best_margin").get<double>();
    s.best_margin_step = j.at("best_margin_step").get<int>();
    // Absent in checkpoints written before early stopping existed; those
    // before metric_for_best tracked the evaluation loss.
    if (j.contains("best_metric")) {
      s.best_metric_name = j.at("metric_for_best").get<std::string>();
      s.best_metric = j.at("best_metric").get<double>();
      s.best_metric_step = j.at("best_metric_step").get<int>();
    } else {
      s.best_metric_name = "eval_loss";
      s.best_metric = j.value("best_eval_loss", 0.0);
      s.best_metric_step = j.value("best_eval_step", -1);
    }
    s.evals_without_improvement = j.value("evals_without_improvement", 0);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
  BRIOCHE_CHECK(int(s.order.size()) == n_examples && s.cursor <= s.order.size(), path, ": a data order over ",
                s.order.size(), " examples, this data set has ", n_examples);
  for (int i : s.order) BRIOCHE_CHECK(i >= 0 && i < n_examples, path, ": example ", i, " outside the data set");

  auto file = formats::SafetensorsFile::open(dir + "/" + kOptimizerFile);
  AdamW::State opt{.m_a = file->tensor("m_a"),
                   .v_a = file->tensor("v_a"),
                   .m_b = file->tensor("m_b"),
                   .v_b = file->tensor("v_b"),
                   .t = j.at("adam_step").get<int>()};
  optimizer.restore(opt);
  return s;
}

}  // namespace brioche::train
