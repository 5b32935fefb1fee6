#include "common/utf8.h"

namespace fleet::utf8 {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Length of the valid sequence at `pos`, or 0 when it is ill-formed; the
// number of bytes of the maximal invalid subpart goes to `invalid_length`.
std::size_t valid_length(std::string_view s, std::size_t pos, char32_t& cp, std::size_t& invalid_length) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char lead = byte(pos);
  invalid_length = 1;
  if (lead < 0x80) {
    cp = lead;
    return 1;
  }
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    cp = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    cp = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return 0;
    unsigned char b = byte(pos + k);
    unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return 0;
    cp = (cp << 6) | (b & 0x3F);
    invalid_length = k + 1;
  }
  return need + 1;
}

}  // namespace

std::size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

char32_t decode(std::string_view text, std::size_t pos, std::size_t& length) {
  char32_t cp = 0;
  std::size_t invalid = 1;
  length = valid_length(text, pos, cp, invalid);
  if (length == 0) {
    length = 1;
    return kReplacement;
  }
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t cp;
    std::size_t invalid;
    std::size_t n = valid_length(text, pos, cp, invalid);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string make_valid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    char32_t cp;
    std::size_t invalid;
    std::size_t n = valid_length(bytes, pos, cp, invalid);
    if (n == 0) {
      append(out, kReplacement);
      pos += invalid;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

}  // namespace fleet::utf8
