// language:response_language (ResponseLanguageChecker): langdetect's verdict
// on the whole response equals the ISO 639-1 code; text it cannot classify
// passes, as in the reference.
#include "eval/instruction_checker.h"
#include "eval/language_detect.h"

namespace brioche::eval {

using namespace checker_args;

std::vector<CheckerRegistration> language_checkers() {
  return {
      {"language:response_language",
       [](const nlohmann::json& kw) {
         const std::string language = text("language:response_language", kw, "language");
         return checker_from([=](std::string_view r) {
           const std::optional<std::string> detected = detect_language(r);
           return !detected || *detected == language;
         });
       }},
  };
}

}  // namespace brioche::eval
