// IFEval scoring: prompts, strict and loose verdicts, and the accuracies
// (lm-eval's ifeval utils.py).
//
// strict: an instruction is followed when the response is not blank and its
// checker passes. loose: the same on any of eight variants of the response
// (as is, without '*' markup, without its first line, its last line, or
// both, and those three without '*'). A prompt is followed when all of its
// instructions are. Prompt-level accuracy = followed prompts / prompts;
// instruction-level accuracy = followed instructions / instructions.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "eval/instruction_checker.h"

namespace brioche::eval {

struct IfevalPrompt {
  int64_t key = 0;
  std::string prompt;
  std::vector<std::string> instruction_ids;
  std::vector<nlohmann::json> kwargs;  // one object per instruction
};

// Reads prompt rows ({"key", "prompt", "instruction_id_list", "kwargs"} per
// line). Errors name `source` and the line; every instruction is built once
// so a bad id or argument is found before any generation.
std::vector<IfevalPrompt> parse_ifeval_prompts(std::string_view jsonl, const std::string& source);
// The 541 prompts of Google's IFEval, compiled into the program.
const std::vector<IfevalPrompt>& builtin_ifeval_prompts();

inline constexpr int kLooseVariants = 8;
std::array<std::string, kLooseVariants> loose_variants(std::string_view response);

struct ResponseVerdicts {
  std::vector<bool> strict;  // one per instruction
  std::vector<bool> loose;
  bool prompt_strict() const;
  bool prompt_loose() const;
};

// Checkers built once per prompt, reused for every response to it.
class PromptScorer {
 public:
  explicit PromptScorer(const IfevalPrompt& prompt);
  ResponseVerdicts score(std::string_view response) const;
  // verdict[instruction][variant], each `!strip(v).empty() && follows(v)`.
  std::vector<std::array<bool, kLooseVariants>> variant_verdicts(std::string_view response) const;

 private:
  std::vector<std::unique_ptr<InstructionChecker>> checkers_;
};

struct InstructionTally {
  int total = 0, strict = 0, loose = 0;
};

struct IfevalAccuracy {
  int prompts = 0, instructions = 0;
  int prompt_strict = 0, prompt_loose = 0, inst_strict = 0, inst_loose = 0;
  std::map<std::string, InstructionTally> per_instruction;  // by instruction id
  double prompt_strict_acc() const { return prompts ? double(prompt_strict) / prompts : 0; }
  double prompt_loose_acc() const { return prompts ? double(prompt_loose) / prompts : 0; }
  double inst_strict_acc() const { return instructions ? double(inst_strict) / instructions : 0; }
  double inst_loose_acc() const { return instructions ? double(inst_loose) / instructions : 0; }
};

IfevalAccuracy tally(const std::vector<IfevalPrompt>& prompts, const std::vector<ResponseVerdicts>& verdicts);

}  // namespace brioche::eval
