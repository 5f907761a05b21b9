// Stack sizes for the tests that prove a depth limit fits a small thread
// stack. The limits are set for optimized builds; a sanitizer build's frames
// are several times larger (redzones, no inlining), so there the same
// recursion gets a proportionally larger stack.
#pragma once

#include <cstddef>

namespace brioche::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr size_t kStackScale = 16;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr size_t kStackScale = 16;
#else
inline constexpr size_t kStackScale = 1;
#endif
#else
inline constexpr size_t kStackScale = 1;
#endif

// `bytes` of stack as the optimized build needs it, scaled for sanitizers.
constexpr size_t test_stack_bytes(size_t bytes) { return bytes * kStackScale; }

}  // namespace brioche::testing
