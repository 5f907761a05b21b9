// Data files compiled into the program (data/ifeval/), so `brioche eval
// ifeval` needs nothing beside the binary: the IFEval prompts, the English
// Punkt model and langdetect's language profiles.
#pragma once

#include <string_view>

namespace brioche::eval {

std::string_view embedded_ifeval_prompts();       // data/ifeval/input_data.jsonl
std::string_view embedded_punkt_english();        // data/ifeval/punkt_english.txt
std::string_view embedded_langdetect_profiles();  // data/ifeval/langdetect_profiles.txt.zst (zstd)

}  // namespace brioche::eval
