// Small UTF-8 helpers: iterate code points, encode them, check validity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fleet::utf8 {

/// Length in bytes of the UTF-8 sequence starting with `lead` (1 for an
/// invalid lead byte, so that callers always make progress).
std::size_t sequence_length(unsigned char lead);

/// Decodes the code point starting at `pos`; sets `length` to the bytes it
/// spans. Invalid or truncated sequences decode as U+FFFD with length 1.
char32_t decode(std::string_view text, std::size_t pos, std::size_t& length);

/// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

/// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values
/// above U+10FFFF).
bool is_valid(std::string_view text);

/// `bytes` with every ill-formed sequence replaced by U+FFFD, one per
/// maximal invalid subpart (the rule Rust's from_utf8_lossy follows).
std::string make_valid(std::string_view bytes);

}  // namespace fleet::utf8
