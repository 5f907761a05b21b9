// Text from files and requests, made safe to print on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace brioche {

// `text` with every byte that is not printable UTF-8 written as \xNN:
// control characters other than newline and tab (ESC and carriage return
// included), DEL, C1 controls, and bytes that do not form a valid UTF-8
// sequence (stray continuation bytes, truncated or overlong sequences,
// surrogates, code points above U+10FFFF). Valid UTF-8 and the backslash
// pass unchanged. Error messages quote bytes from model files and JSON
// parsers; printed raw, a hostile file could move the cursor, rewrite the
// line or recolour the terminal.
std::string printable(std::string_view text);

}  // namespace brioche
