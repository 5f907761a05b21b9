// Token lengths of dataset rows through the default model's tokenizer and
// chat template (cli/data_tokens.h) against tools/oracle/data_goldens.py
// (Hugging Face tokenizers + transformers' template renderer), and against
// what train::load_dataset builds from the same rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/common.h"
#include "cli/data_tokens.h"
#include "data/curate.h"
#include "data/read_examples.h"
#include "engine/model_tokenizer.h"

namespace brioche::cli {
namespace {

using data::json;

std::string data_dir() { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/data/"; }

json golden(const std::string& name) {
  std::ifstream in(data_dir() + "golden/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

class DataTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(default_model_path())) GTEST_SKIP() << "skipped: default model not installed";
    if (!counter_) counter_ = std::make_unique<ModelTokenCounter>(default_model_path());
  }
  static std::unique_ptr<ModelTokenCounter> counter_;
};
std::unique_ptr<ModelTokenCounter> DataTokens::counter_;

TEST_F(DataTokens, EveryFixtureRowMatchesTheReference) {
  const json g = golden("token_lengths.json");
  int checked = 0;
  for (const auto& [file, rows] : g["files"].items()) {
    data::RowReport report;
    data::read_examples(data_dir() + "fixtures/" + file, {}, report,
                        [&](const data::RowLocation& at, data::Example& ex) {
                          const json& want = rows[std::to_string(at.number)];
                          SCOPED_TRACE(file + " " + at.text());
                          if (ex.layout == data::Layout::Text) {
                            EXPECT_EQ(counter_->text(ex.text), want["text"].get<int64_t>());
                          } else {
                            ASSERT_EQ(ex.replies.size(), want["replies"].size());
                            for (size_t i = 0; i < ex.replies.size(); ++i) {
                              const data::ExchangeTokens t = counter_->exchange(ex.prompt, ex.replies[i].message);
                              EXPECT_EQ(t.prompt, want["prompt"].get<int64_t>());
                              EXPECT_EQ(t.reply, want["replies"][i].get<int64_t>());
                            }
                          }
                          ++checked;
                          report.keep();
                        });
  }
  EXPECT_GE(checked, 20);
}

TEST_F(DataTokens, MaxTokensCurationMatchesTheReference) {
  const json g = golden("curate_max_tokens.json");
  const data::CurateResult r = data::curate(data_dir() + "fixtures/" + g["input"].get<std::string>(),
                                            {.max_tokens = g["options"]["max_tokens"], .counter = counter_.get()});
  EXPECT_EQ(r.report.count("too_long"), g["report"]["dropped"]["too_long"].get<int64_t>());
  EXPECT_EQ(r.report.kept(), g["report"]["kept"].get<int64_t>());
  EXPECT_EQ(json(r.rows.train), g["train"]);
  // Line 7 repeats line 1's prompt; line 1 is too long, so line 7 is the first kept row of that prompt.
  EXPECT_EQ(r.report.count("duplicate_prompt"), 0);
}

// The lengths curate measures are the lengths the trainer builds.
TEST_F(DataTokens, LengthsAreWhatTrainLoadDatasetBuilds) {
  const data::CurateResult r = data::curate(data_dir() + "fixtures/ultrafeedback.jsonl", {.counter = counter_.get()});
  const auto path = std::filesystem::temp_directory_path() / "brioche_data_tokens_pairs.jsonl";
  data::write_jsonl(path.string(), r.rows.train);
  model::Checkpoint ck = model::load_gguf_checkpoint(default_model_path());
  auto tok = engine::load_model_tokenizer(ck.gguf.get(), ck.directory);
  const train::Dataset ds =
      train::load_dataset(path.string(), {.preference = true,
                                          .max_seq_length = 4096,
                                          .tokenizer = tok.get(),
                                          .render = train::make_chat_renderer(ck.chat_template, *tok),
                                          .quiet = true});
  ASSERT_EQ(ds.pairs.size(), r.rows.train.size());
  data::RowReport report;
  size_t i = 0;
  data::read_examples(path.string(), {}, report, [&](const data::RowLocation&, data::Example& ex) {
    const train::TokenizedPair& p = ds.pairs[i++];
    const data::ExchangeTokens c = counter_->exchange(ex.prompt, ex.replies[0].message);
    const data::ExchangeTokens rj = counter_->exchange(ex.prompt, ex.replies[1].message);
    EXPECT_EQ(c.prompt, int64_t(p.prompt.size()));
    EXPECT_EQ(c.reply, int64_t(p.chosen.size()));
    EXPECT_EQ(rj.reply, int64_t(p.rejected.size()));
    report.keep();
  });
  EXPECT_EQ(i, ds.pairs.size());
}

}  // namespace
}  // namespace brioche::cli
