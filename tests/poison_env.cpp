// Linked into every test binary: fresh activations (ops::uninitialized) are
// filled with NaN bytes while tests run, on the CPU and on CUDA, so a kernel
// that reads a buffer before writing it fails a comparison instead of
// passing on zeros or a previous buffer's values. Programs leave them
// unfilled (one pass over memory less a buffer). An explicit
// BRIOCHE_POISON=0 in the environment still turns it off.
#include <cstdlib>

namespace {

// Runs before main, so before the first ops::uninitialized reads the switch.
const bool kPoisonSet = [] { return ::setenv("BRIOCHE_POISON", "1", /*overwrite=*/0) == 0; }();

}  // namespace
