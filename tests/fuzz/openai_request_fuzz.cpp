// libFuzzer target: an OpenAI request body, as parse_api_request reads it for
// each endpoint. Any input must either parse or throw ApiError (a 4xx, never
// a 5xx); a parsed request names only token ids inside the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace brioche::server;
  constexpr int32_t kVocab = 1000;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Endpoint endpoint : {Endpoint::ChatCompletions, Endpoint::Completions, Endpoint::Responses}) {
    try {
      ApiRequest req = parse_api_request(endpoint, body, {.vocab_size = kVocab});
      for (int32_t id : req.prompt_token_ids)
        if (id < 0 || id >= kVocab) std::abort();
      for (const auto& [id, bias] : req.generation.sampling.logit_bias)
        if (id < 0 || id >= kVocab) std::abort();
      if (req.generation.n < 1 || req.generation.n > 128) std::abort();
      volatile size_t sink = req.messages.dump().size();  // the normalized messages serialize
      (void)sink;
    } catch (const ApiError& e) {
      if (e.status < 400 || e.status >= 500) std::abort();
    }
  }
  return 0;
}
