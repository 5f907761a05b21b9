#include "eval/ifeval_generate.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/error.h"

namespace brioche::eval {

std::vector<GeneratedResponse> generate_ifeval_responses(engine::Engine& engine,
                                                         const std::vector<IfevalPrompt>& prompts,
                                                         const IfevalGeneration& how) {
  BRIOCHE_CHECK(how.render_prompt != nullptr, "IFEval generation: no prompt renderer");
  // New events wake this thread, which drains them and reports progress.
  // Shared, not on this stack: the engine may still call on_events for a
  // cancelled request after an error has left this function.
  struct Wakeups {
    std::mutex mutex;
    std::condition_variable cv;
    uint64_t count = 0;
  };
  auto wake = std::make_shared<Wakeups>();
  std::vector<engine::GenerationRequest> requests;
  requests.reserve(prompts.size());
  for (const IfevalPrompt& p : prompts) {
    engine::GenerationRequest r;
    r.prompt_tokens = how.render_prompt(p.prompt);
    r.max_tokens = how.max_tokens;
    r.sampling.temperature = how.temperature;
    r.sampling.seed = how.seed + uint64_t(p.key);
    r.adapter = how.adapter;
    r.on_events = [wake] {
      {
        std::lock_guard lock(wake->mutex);
        ++wake->count;
      }
      wake->cv.notify_one();
    };
    requests.push_back(std::move(r));
  }
  std::vector<std::shared_ptr<engine::RequestHandle>> handles = engine.submit_all(std::move(requests));

  std::vector<GeneratedResponse> out(prompts.size());
  std::vector<bool> finished(prompts.size(), false);
  int done = 0;
  int64_t generated = 0;
  uint64_t seen = 0;
  while (done < int(prompts.size())) {
    {
      std::unique_lock lock(wake->mutex);
      wake->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return wake->count != seen; });
      seen = wake->count;
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      if (finished[i]) continue;
      for (engine::GenerationEvent& e : handles[i]->drain()) {
        out[i].text += e.text;
        generated += int64_t(e.tokens.size());
        out[i].completion_tokens += int(e.tokens.size());
        if (e.finish) {
          out[i].finish_reason = engine::finish_reason_name(*e.finish);
          if (*e.finish == engine::FinishReason::Error) {
            for (const auto& h : handles) h->cancel();
            throw Error("IFEval prompt " + std::to_string(prompts[i].key) + ": generation failed: " + e.error);
          }
        }
        if (e.done) {
          finished[i] = true;
          ++done;
        }
      }
    }
    if (how.progress) how.progress(done, int(prompts.size()), generated);
  }
  return out;
}

}  // namespace brioche::eval
