#include "eval/embedded_data.h"

// The assembler copies each file's bytes into .rodata between a start and an
// end symbol. BRIOCHE_EVAL_DATA_DIR comes from CMake, which also lists the
// files as dependencies of this object so an edited file rebuilds it.
#define BRIOCHE_EMBED(symbol, file)               \
  asm(".section .rodata\n"                        \
      ".balign 16\n"                              \
      ".global " #symbol "_begin\n" #symbol       \
      "_begin:\n"                                 \
      ".incbin \"" BRIOCHE_EVAL_DATA_DIR "/" file \
      "\"\n"                                      \
      ".global " #symbol "_end\n" #symbol         \
      "_end:\n"                                   \
      ".byte 0\n"                                 \
      ".previous\n");                             \
  extern "C" const char symbol##_begin[];         \
  extern "C" const char symbol##_end[];

BRIOCHE_EMBED(brioche_ifeval_prompts, "input_data.jsonl")
BRIOCHE_EMBED(brioche_punkt_english, "punkt_english.txt")
BRIOCHE_EMBED(brioche_langdetect_profiles, "langdetect_profiles.txt.zst")

namespace brioche::eval {

std::string_view embedded_ifeval_prompts() {
  return {brioche_ifeval_prompts_begin, size_t(brioche_ifeval_prompts_end - brioche_ifeval_prompts_begin)};
}
std::string_view embedded_punkt_english() {
  return {brioche_punkt_english_begin, size_t(brioche_punkt_english_end - brioche_punkt_english_begin)};
}
std::string_view embedded_langdetect_profiles() {
  return {brioche_langdetect_profiles_begin,
          size_t(brioche_langdetect_profiles_end - brioche_langdetect_profiles_begin)};
}

}  // namespace brioche::eval
