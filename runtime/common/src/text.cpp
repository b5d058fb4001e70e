#include "funnel/common/text.hpp"

#include <cstdint>

namespace funnel {
namespace {

// The length of the valid UTF-8 sequence at the start of `s` (1..4), or 0 when it is not one
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t sequence_length(std::string_view s) noexcept {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string sanitize_text(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  while (!in.empty()) {
    const size_t n = sequence_length(in);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      in.remove_prefix(1);
      continue;
    }
    const auto c = static_cast<uint8_t>(in[0]);
    const bool c1 = n == 2 && c == 0xC2 && static_cast<uint8_t>(in[1]) < 0xA0;
    if ((n == 1 && (c < 0x20 || c == 0x7F)) || c1) out += '?';
    else out.append(in.substr(0, n));
    in.remove_prefix(n);
  }
  return out;
}

std::string_view utf8_prefix(std::string_view in, size_t max_bytes) noexcept {
  if (in.size() <= max_bytes) return in;
  size_t cut = max_bytes;
  // Back over continuation bytes to the lead byte of the character the cut splits.
  while (cut > 0 && (static_cast<uint8_t>(in[cut]) & 0xC0) == 0x80) --cut;
  return in.substr(0, cut);
}

}  // namespace funnel
