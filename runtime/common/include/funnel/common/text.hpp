// Text that comes from another process (a client's command line, a control request) on its
// way into JSON, logs and reports: valid UTF-8 with no control characters, whatever bytes
// were sent.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace funnel {

// `in` as valid UTF-8: each byte of a malformed, overlong or surrogate sequence becomes
// U+FFFD, each control character (C0, DEL, C1) a '?'; valid text passes unchanged.
std::string sanitize_text(std::string_view in);

// The longest prefix of `in` of at most `max_bytes` bytes that does not end inside a UTF-8
// sequence (a cut through a character drops the whole character).
std::string_view utf8_prefix(std::string_view in, size_t max_bytes) noexcept;

}  // namespace funnel
