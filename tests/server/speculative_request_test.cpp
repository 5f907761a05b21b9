// The request field that opts one request out of speculative decoding.
#include <gtest/gtest.h>

#include "server/openai_request.h"

namespace brioche::server {
namespace {

TEST(SpeculativeRequestField, DefaultsOnAndFalseOptsOut) {
  EXPECT_TRUE(parse_api_request(Endpoint::Completions, R"({"prompt": "a"})").generation.speculative);
  EXPECT_FALSE(parse_api_request(Endpoint::ChatCompletions,
                                 R"({"messages": [{"role": "user", "content": "a"}], "speculative": false})")
                   .generation.speculative);
  EXPECT_TRUE(
      parse_api_request(Endpoint::Completions, R"({"prompt": "a", "speculative": true})").generation.speculative);
}

TEST(SpeculativeRequestField, ANonBooleanNamesTheField) {
  try {
    parse_api_request(Endpoint::Completions, R"({"prompt": "a", "speculative": "no"})");
    ADD_FAILURE() << "expected an ApiError";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "speculative") << e.message;
  }
}

}  // namespace
}  // namespace brioche::server
