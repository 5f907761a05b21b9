// Rules that match the same text the same way, merged before the automaton
// is built: JSON schemas repeat sub-schemas (Kubernetes' ObjectMeta and the
// like, hundreds of times in one list schema), and the converter gives each
// use its own rules. The mask compiler already shares their masks (equal
// structure hashes); merging them first also saves their automaton states
// and every per-state step of the compile.
#pragma once

#include "grammar/grammar.h"

namespace brioche::grammar {

// A copy of `g` in which every reference to a rule goes to the first rule
// structurally equal to it: the same expression tree (kinds, bytes, classes,
// counts), the same lookahead, and references to equal rules at the same
// places (the coarsest such partition, recursion included). Such rules
// match the same language, so the grammar's language, its automaton's
// masks and the matcher's answers are unchanged; the rules no longer
// referenced are left unreachable (never built). uniqueItems item rules are
// kept apart (a call's values are compared per rule and caller frame).
Grammar merge_equal_rules(const Grammar& g);

}  // namespace brioche::grammar
