// Text that came from outside Kiln (a manifest, a catalog row, a worker's
// message, a file name) made safe to print on a terminal: control characters
// (ESC and the other C0 codes, DEL, the C1 codes U+0080..U+009F) and bytes that
// are not UTF-8 are written as visible escapes (\x1b, \u009b), so such text can
// neither move the cursor, retitle the window, nor hide what follows it. Pure
// functions, thread-safe.
#pragma once
#include <string>
#include <string_view>

namespace kiln {

// `s` with every control character and invalid UTF-8 byte escaped; with
// `keep_newlines`, '\n' and '\t' stay as they are (multi-line error messages).
std::string terminal_safe(std::string_view s, bool keep_newlines = false);

}  // namespace kiln
