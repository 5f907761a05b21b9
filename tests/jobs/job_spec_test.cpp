#include "jobs/job_spec.h"

#include <gtest/gtest.h>

#include "jobs/dataset_check.h"
#include "jobs/jobs_error.h"

namespace brioche::jobs {
namespace {

using nlohmann::json;

JobsError refusal(const json& body) {
  try {
    parse_job_spec(body);
  } catch (const JobsError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return JobsError(0, "", "", "");
}

TEST(JobSpec, OpenAiAndBriocheNamesMapOntoTrainOptions) {
  JobSpec s = parse_job_spec({{"seed", 5},
                              {"method",
                               {{"type", "orpo"},
                                {"orpo",
                                 {{"hyperparameters",
                                   {{"lambda", 0.2},
                                    {"n_steps", 12},
                                    {"max_length", 256},
                                    {"rank", 8},
                                    {"n_epochs", "auto"},
                                    {"segment_size", 2}}}}}}}});
  EXPECT_EQ(s.method_type, "orpo");
  EXPECT_TRUE(s.preference);
  EXPECT_EQ(s.seed, 5);
  EXPECT_EQ(s.options["orpo_lambda"], 0.2);
  EXPECT_EQ(s.options["iters"], 12);
  EXPECT_EQ(s.options["max_seq_length"], 256);
  EXPECT_EQ(s.options["segment_size"], 2);
  EXPECT_FALSE(s.options.contains("epochs"));  // "auto" is the default
  JobSpec m = parse_job_spec(
      {{"method", {{"type", "dpo"}, {"dpo", {{"hyperparameters", {{"learning_rate_multiplier", 2}}}}}}}});
  EXPECT_DOUBLE_EQ(m.options["learning_rate"].get<double>(), 2e-5);
  JobSpec legacy = parse_job_spec({{"hyperparameters", {{"n_epochs", 3}}}});
  EXPECT_EQ(legacy.method_type, "supervised");
  EXPECT_EQ(legacy.options["epochs"], 3);
}

TEST(JobSpec, RefusalsNameTheKey) {
  EXPECT_EQ(refusal({{"method", {{"type", "rlhf"}}}}).code, "invalid_method");
  EXPECT_EQ(refusal({{"method", {{"type", "orpo"}, {"dpo", json::object()}}}}).param, "method.dpo");
  JobsError unknown = refusal({{"method", {{"type", "orpo"}, {"orpo", {{"hyperparameters", {{"warp", 1}}}}}}}});
  EXPECT_EQ(unknown.code, "unknown_hyperparameter");
  EXPECT_EQ(unknown.param, "method.orpo.hyperparameters.warp");
  JobsError owned = refusal({{"method", {{"type", "orpo"}, {"orpo", {{"hyperparameters", {{"output", "/tmp/x"}}}}}}}});
  EXPECT_EQ(owned.code, "unknown_hyperparameter");
  // A test file is a path on the server, as the data: a job holds rows out with test_split instead.
  JobsError test_file =
      refusal({{"method", {{"type", "orpo"}, {"orpo", {{"hyperparameters", {{"test_file", "/etc/passwd"}}}}}}}});
  EXPECT_EQ(test_file.code, "unknown_hyperparameter");
  JobsError type = refusal({{"method", {{"type", "sft"}}}});
  EXPECT_EQ(type.code, "invalid_method");
  JobsError bad =
      refusal({{"method", {{"type", "supervised"}, {"supervised", {{"hyperparameters", {{"rank", "x"}}}}}}}});
  EXPECT_EQ(bad.code, "invalid_hyperparameter");
  EXPECT_EQ(bad.param, "method.supervised.hyperparameters.rank");
  EXPECT_EQ(
      refusal({{"method", {{"type", "supervised"}, {"supervised", {{"hyperparameters", {{"batch_size", 0}}}}}}}}).code,
      "invalid_hyperparameter");  // finalize()'s range checks
  EXPECT_EQ(refusal({{"seed", -1}}).param, "seed");
}

TEST(JobSpec, StepsAndMemoryEstimate) {
  EXPECT_EQ(total_steps({{"iters", 7}}, 100), 7);
  EXPECT_EQ(total_steps({{"epochs", 2}, {"batch_size", 3}}, 10), 8);  // 2 x ceil(10 / 3)
  EXPECT_EQ(total_steps(json::object(), 5), 5);
  EXPECT_EQ(total_steps({{"test_split", 0.2}}, 40), 32);  // the 8 held-out rows are not trained on
  ModelShape shape{.weights_bytes = 100 << 20};
  shape.config.vocab_size = 1000, shape.config.hidden_size = 64, shape.config.intermediate_size = 128;
  shape.config.n_layers = 4, shape.config.n_heads = 4, shape.config.n_kv_heads = 2, shape.config.head_dim = 16;
  const int64_t base = estimate_memory_bytes({{"method", "sft"}, {"max_seq_length", 128}}, shape);
  const int64_t pref = estimate_memory_bytes({{"method", "orpo"}, {"max_seq_length", 128}}, shape);
  const int64_t longer = estimate_memory_bytes({{"method", "sft"}, {"max_seq_length", 1024}}, shape);
  const int64_t segmented =
      estimate_memory_bytes({{"method", "sft"}, {"max_seq_length", 1024}, {"segment_size", 2}}, shape);
  EXPECT_GT(base, int64_t(100 + 256) << 20);
  EXPECT_GT(pref, base);
  EXPECT_GT(longer, base);
  EXPECT_LE(segmented, longer);
  // Smaller segments hold less: a boundary keeps only the residual stream,
  // not a whole layer's activations (segment 1 once estimated above 4).
  const int64_t seg1 = estimate_memory_bytes({{"method", "sft"}, {"max_seq_length", 1024}, {"segment_size", 1}}, shape);
  const int64_t seg4 = estimate_memory_bytes({{"method", "sft"}, {"max_seq_length", 1024}, {"segment_size", 4}}, shape);
  EXPECT_LT(seg1, segmented);
  EXPECT_LT(segmented, seg4);
  // 1024 tokens x (1 layer x (10 x 64 + 3 x 128) + 4 boundaries x 64) x 4 B above the unsegmented base's head and rest.
  EXPECT_EQ(seg1 - (longer - int64_t(1024) * 4 * (10 * 64 + 3 * 128) * 4),
            int64_t(1024) * (1 * (10 * 64 + 3 * 128) + 4 * 64) * 4);
}

TEST(DatasetCheck, RowKindsAndHistogram) {
  EXPECT_EQ(row_kind({{"prompt", "a"}, {"chosen", "b"}, {"rejected", "c"}}), "preference");
  EXPECT_EQ(row_kind({{"dpo", {{"prompt", "a"}, {"chosen", "b"}}}}), "preference");
  EXPECT_EQ(row_kind({{"messages", json::array()}}), "sft");
  Histogram h = length_histogram({1, 7, 8, 30, 100}, 4);
  ASSERT_FALSE(h.edges.empty());
  EXPECT_EQ(h.edges.size(), h.counts.size() + 1);
  int64_t total = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) total += h.counts[i];
  EXPECT_EQ(total, 5);
  EXPECT_GT(h.edges.back(), 100);
  EXPECT_LE(h.counts.size(), 4u);
  EXPECT_TRUE(length_histogram({}, 4).counts.empty());
}

}  // namespace
}  // namespace brioche::jobs
