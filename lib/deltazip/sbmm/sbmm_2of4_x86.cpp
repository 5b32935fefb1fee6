#include "deltazip/sbmm/sbmm_2of4_x86.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/cpu_isa.h"
#include "common/simd_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fleet::deltazip::x86 {

#if defined(__x86_64__)

// Every function that touches vectors carries its target itself
// (FLEET_AVX2, common/simd_x86.h; no lambdas: they would not inherit it), so
// nothing outside them needs AVX2 or AVX-512.
using simd::sum_lanes;

namespace {

// For each byte of 2:4 positions (two groups of four columns, low nibble
// first; in a nibble the first kept weight's position in bits 0-1, the
// second's in bits 2-3): the lane each kept weight lands in. Per lane, the
// shift that brings its code to the bottom of the chunk's code word (codes
// in the order first, second of group 0, then group 1) and a mask that is
// zero at the pruned lanes: the source the kernels' wider tables are built from.
struct PositionTable {
  std::uint8_t shift4[256][8], shift2[256][8];
  std::int8_t keep[256][8];

  PositionTable() {
    for (int p = 0; p < 256; ++p) {
      for (int lane = 0; lane < 8; ++lane) shift4[p][lane] = shift2[p][lane] = 0, keep[p][lane] = 0;
      for (int half = 0; half < 2; ++half) {
        const int nibble = (p >> (4 * half)) & 15;
        const int lanes[2] = {4 * half + (nibble & 3), 4 * half + (nibble >> 2)};
        for (int k = 0; k < 2; ++k) {
          const int slot = 2 * half + k;
          shift4[p][lanes[k]] = static_cast<std::uint8_t>(4 * slot);
          shift2[p][lanes[k]] = static_cast<std::uint8_t>(2 * slot);
          keep[p][lanes[k]] = -1;
        }
      }
    }
  }
};

const PositionTable& position_table() {
  static const PositionTable table;
  return table;
}

// Decoding W + Δ tile by tile streams W's rows from memory: a row `kAhead`
// rows on has its codes and positions fetched into L2 when decoding of the
// current row starts, and its row of W line by line over the current row's
// loop, so they arrive while it computes (a row takes about a memory
// latency). Tiles of W + Δ from 64 streamed 2048 x 768 matrices: 1.31x
// faster on a Xeon, AVX-512 and AVX2 alike (bench_dz_serve streamed). The
// products need none: decoding, not memory, sets their pace (prefetching
// rows ahead left 300 streamed products of 2 rows as fast as before).
struct RowAhead {
  static constexpr std::int64_t kAhead = 2;
  const char* plus = nullptr;  // the row of W to fetch over this row's loop
  std::int64_t lines = 0, per_step = 0;

  // Row o of [o, end) with its W row at `add`, in a loop of `steps` iterations.
  RowAhead(const SbmmLayout& l, int bits, std::int64_t o, std::int64_t end, const float* add, std::int64_t steps) {
    if (o + kAhead >= end || !simd::prefetch_in_use()) return;
    const std::int64_t code_bytes = l.cols / 2 * bits / 8, position_bytes = l.cols / 8;
    const auto* codes = reinterpret_cast<const char*>(l.codes + (o + kAhead) * code_bytes);
    const auto* positions = reinterpret_cast<const char*>(l.indices + (o + kAhead) * position_bytes);
    for (std::int64_t b = 0; b < code_bytes; b += 64) simd::prefetch_l2(codes + b);
    for (std::int64_t b = 0; b < position_bytes; b += 64) simd::prefetch_l2(positions + b);
    if (add == nullptr) return;
    plus = reinterpret_cast<const char*>(add + kAhead * l.cols);
    lines = (l.cols * static_cast<std::int64_t>(sizeof(float)) + 63) / 64;
    per_step = (lines + steps - 1) / steps;
  }
  void step(std::int64_t i) const { simd::prefetch_l2_share(plus, lines, per_step, i); }
};

// The position table widened to one int32 per lane, so that a chunk's shifts
// and mask are each one aligned load with no unpacking (24 KiB).
struct alignas(32) WideTable {
  std::int32_t shift4[256][8], shift2[256][8], keep[256][8];

  WideTable() {
    const PositionTable& narrow = position_table();
    for (int p = 0; p < 256; ++p)
      for (int lane = 0; lane < 8; ++lane) {
        shift4[p][lane] = narrow.shift4[p][lane];
        shift2[p][lane] = narrow.shift2[p][lane];
        keep[p][lane] = narrow.keep[p][lane];
      }
  }
};

const WideTable& wide_table() {
  static const WideTable table;
  return table;
}

// What turns a row's codes into its weights for decoding: scale · (code -
// zero) per code, computed with the same float operations as the portable
// decoder. 2-bit codes read it from a table that one permute indexes (it
// repeats every four entries, as Centre's does).
struct Dequant {
  __m256 scale, zero, table;
};

FLEET_AVX2 inline Dequant dequant_of(float scale, float zero) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zero);
  const __m256i codes = _mm256_and_si256(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(3));
  return Dequant{s, z, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(codes), z), s)};
}

// Chunk i of a row (columns [8i, 8i + 8)): each lane's code shifted to the
// bottom of the lane (the bits of later codes above it, unmasked), and a mask
// that is zero at the pruned lanes. The code word is read as four bytes (the
// buffer is padded) and broadcast.
struct ShiftedChunk {
  __m256i shifted, keep;
};

template <int Bits>
FLEET_AVX2 inline ShiftedChunk shifted_chunk(const std::uint8_t* codes, const std::uint8_t* positions, std::int64_t i,
                                             const WideTable& table) {
  const unsigned p = positions[i];
  std::int32_t word;
  std::memcpy(&word, codes + (Bits == 4 ? 2 * i : i), sizeof word);
  const auto* shift = reinterpret_cast<const __m256i*>(Bits == 4 ? table.shift4[p] : table.shift2[p]);
  return ShiftedChunk{_mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_load_si256(shift)),
                      _mm256_load_si256(reinterpret_cast<const __m256i*>(table.keep[p]))};
}

// Chunk i of a row as dense weights: scale · (code - zero) where kept, +0
// elsewhere.
template <int Bits>
FLEET_AVX2 inline __m256 decode_chunk(const std::uint8_t* codes, const std::uint8_t* positions, std::int64_t i,
                                      const WideTable& table, const Dequant& d) {
  const ShiftedChunk c = shifted_chunk<Bits>(codes, positions, i, table);
  const __m256 keep = _mm256_castsi256_ps(c.keep);
  if constexpr (Bits == 2) return _mm256_and_ps(_mm256_permutevar8x32_ps(d.table, c.shifted), keep);
  const __m256i q = _mm256_and_si256(c.shifted, _mm256_set1_epi32(15));
  return _mm256_and_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q), d.zero), d.scale), keep);
}

// Columns [8i, 8i + 8) of one row as (code - zero) where kept, 0 elsewhere:
// small integers, exact in float. The products leave the row's scale out and
// apply it once to each finished sum, which takes the subtraction and the
// multiplication to the integer side and saves a multiplication per chunk.
// What turns one row's codes into centred values: its zero point, which
// 4-bit codes subtract on the integer side, and for 2-bit codes a table of
// `code - zero` that one permute reads (the permute looks at the low three
// bits of each lane, so the table repeats every four entries and the bits of
// the next codes above need no masking: two operations fewer per chunk).
struct Centre {
  __m256i zero;
  __m256 table;
};

FLEET_AVX2 inline Centre centre_of(float zero) {
  const __m256i codes = _mm256_and_si256(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(3));
  return Centre{_mm256_set1_epi32(static_cast<std::int32_t>(zero)),
                _mm256_sub_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(zero))};
}

template <int Bits>
FLEET_AVX2 inline __m256 centred_chunk(const std::uint8_t* codes, const std::uint8_t* positions, std::int64_t i,
                                       const WideTable& table, const Centre& centre) {
  const ShiftedChunk c = shifted_chunk<Bits>(codes, positions, i, table);
  if constexpr (Bits == 2)
    return _mm256_and_ps(_mm256_permutevar8x32_ps(centre.table, c.shifted), _mm256_castsi256_ps(c.keep));
  const __m256i q = _mm256_and_si256(c.shifted, _mm256_set1_epi32((1 << Bits) - 1));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_sub_epi32(q, centre.zero), c.keep));
}

// R input rows (at most 4) times one output row. Two accumulators per input
// row (even and odd chunks) keep two FMA chains in flight; they are added in
// a fixed order, so the result depends only on the data.
template <int Bits, int R>
FLEET_AVX2 void row_block(const SbmmLayout& l, std::int64_t o, const float* x, std::int64_t x_stride, float* y,
                          std::int64_t y_stride) {
  const std::int64_t chunks = l.cols / 8;
  const WideTable& table = wide_table();
  const std::uint8_t* codes = l.codes + o * (l.cols / 2 * Bits / 8);
  const std::uint8_t* positions = l.indices + o * (l.cols / 8);
  const Centre zero = centre_of(l.zeros[o]);
  __m256 even[R], odd[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 2 <= chunks; i += 2) {
    const __m256 a = centred_chunk<Bits>(codes, positions, i, table, zero);
    const __m256 b = centred_chunk<Bits>(codes, positions, i + 1, table, zero);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      even[r] = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + r * x_stride + 8 * i), even[r]);
      odd[r] = _mm256_fmadd_ps(b, _mm256_loadu_ps(x + r * x_stride + 8 * i + 8), odd[r]);
    }
  }
  if (i < chunks) {
    const __m256 a = centred_chunk<Bits>(codes, positions, i, table, zero);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) even[r] = _mm256_fmadd_ps(a, _mm256_loadu_ps(x + r * x_stride + 8 * i), even[r]);
  }
  const float scale = l.scales[o];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r * y_stride + o] += scale * sum_lanes(_mm256_add_ps(even[r], odd[r]));
}

// For a lone input row, decoding dominates row_block: a chunk's eight lanes
// cost a dozen operations for four kept weights. Here the eight kept
// weights of two chunks fill one vector straight from their code word
// (constant shifts, no per-position table), and x is brought to them
// instead: two permutes pick the kept columns of the two chunks and a blend
// joins them (1.45-1.6x faster for one row; from two rows on, the permutes
// per row cost more than row_block's shared decoding saves). Per position
// byte, the column of each kept weight in code order, in lanes 0-3 and again
// in 4-7 (8 KiB).
struct alignas(32) GatherTable {
  std::int32_t column[256][8];

  GatherTable() {
    for (int p = 0; p < 256; ++p)
      for (int slot = 0; slot < 4; ++slot) {
        const int half = slot / 2, nibble = (p >> (4 * half)) & 15;
        column[p][slot] = column[p][slot + 4] = 4 * half + ((slot % 2 == 0) ? (nibble & 3) : (nibble >> 2));
      }
  }
};

const GatherTable& gather_table() {
  static const GatherTable table;
  return table;
}

// The kept weights of chunks i and i + 1 as (code - zero): lanes 0-3 the
// first chunk's in code order, 4-7 the second's. Only lanes 0-3 mean
// anything when i is the last chunk.
template <int Bits>
FLEET_AVX2 inline __m256 kept_pair(const std::uint8_t* codes, std::int64_t i, const Centre& centre) {
  std::int32_t word;
  std::memcpy(&word, codes + (Bits == 4 ? 2 * i : i), sizeof word);  // the buffer is padded
  const __m256i shift =
      Bits == 4 ? _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0) : _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0);
  const __m256i shifted = _mm256_srlv_epi32(_mm256_set1_epi32(word), shift);
  if constexpr (Bits == 2) return _mm256_permutevar8x32_ps(centre.table, shifted);
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(shifted, _mm256_set1_epi32(15)), centre.zero));
}

FLEET_AVX2 inline __m256i kept_columns(const GatherTable& table, const std::uint8_t* positions, std::int64_t i) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(table.column[positions[i]]));
}

// x's columns under the kept weights of chunks i and i + 1 (lanes as in
// kept_pair); `last`: chunk i alone, lanes 4-7 zero.
FLEET_AVX2 inline __m256 gathered_x(const float* x, const GatherTable& table, const std::uint8_t* positions,
                                    std::int64_t i, bool last) {
  const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + 8 * i), kept_columns(table, positions, i));
  const __m256 b =
      last ? _mm256_setzero_ps()
           : _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + 8 * i + 8), kept_columns(table, positions, i + 1));
  return _mm256_blend_ps(a, b, 0xF0);
}

// One input row times one output row; two accumulators (alternate chunk
// pairs), added in a fixed order.
template <int Bits>
FLEET_AVX2 void gather_row(const SbmmLayout& l, std::int64_t o, const float* x, float* y) {
  const std::int64_t chunks = l.cols / 8;
  const GatherTable& table = gather_table();
  const std::uint8_t* codes = l.codes + o * (l.cols / 2 * Bits / 8);
  const std::uint8_t* positions = l.indices + o * (l.cols / 8);
  const Centre zero = centre_of(l.zeros[o]);
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 4 <= chunks; i += 4) {
    even = _mm256_fmadd_ps(kept_pair<Bits>(codes, i, zero), gathered_x(x, table, positions, i, false), even);
    odd = _mm256_fmadd_ps(kept_pair<Bits>(codes, i + 2, zero), gathered_x(x, table, positions, i + 2, false), odd);
  }
  for (; i < chunks; i += 2)  // one or two chunks of a pair left, then perhaps one more
    even = _mm256_fmadd_ps(kept_pair<Bits>(codes, i, zero), gathered_x(x, table, positions, i, i + 1 == chunks), even);
  y[o] += l.scales[o] * sum_lanes(_mm256_add_ps(even, odd));
}

template <int Bits>
FLEET_AVX2 void multiply_add_bits(const SbmmLayout& l, const float* x, std::int64_t n, std::int64_t x_stride, float* y,
                                  std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  for (std::int64_t r0 = 0; r0 < n; r0 += 4) {
    const float* xr = x + r0 * x_stride;
    float* yr = y + r0 * y_stride;
    const auto rows = std::min<std::int64_t>(4, n - r0);
    if (rows == 1) {  // the gathering kernel only pays for a lone row (bench_dz_serve sbmm)
      for (std::int64_t o = row_begin; o < row_end; ++o) gather_row<Bits>(l, o, xr, yr);
      continue;
    }
    for (std::int64_t o = row_begin; o < row_end; ++o) switch (rows) {
        case 2:
          row_block<Bits, 2>(l, o, xr, x_stride, yr, y_stride);
          break;
        case 3:
          row_block<Bits, 3>(l, o, xr, x_stride, yr, y_stride);
          break;
        default:
          row_block<Bits, 4>(l, o, xr, x_stride, yr, y_stride);
          break;
      }
  }
}

template <int Bits>
FLEET_AVX2 void decode_bits(const SbmmLayout& l, std::int64_t begin, std::int64_t end, float* out, const float* plus) {
  const WideTable& table = wide_table();
  for (std::int64_t o = begin; o < end; ++o) {
    const std::uint8_t* codes = l.codes + o * (l.cols / 2 * Bits / 8);
    const std::uint8_t* positions = l.indices + o * (l.cols / 8);
    const Dequant d = dequant_of(l.scales[o], l.zeros[o]);
    float* dst = out + (o - begin) * l.cols;
    if (plus == nullptr) {
      for (std::int64_t i = 0; i < l.cols / 8; ++i)
        _mm256_storeu_ps(dst + 8 * i, decode_chunk<Bits>(codes, positions, i, table, d));
      continue;
    }
    const float* add = plus + (o - begin) * l.cols;
    const RowAhead ahead(l, Bits, o, end, add, l.cols / 8);
    for (std::int64_t i = 0; i < l.cols / 8; ++i) {
      ahead.step(i);
      _mm256_storeu_ps(dst + 8 * i,
                       _mm256_add_ps(decode_chunk<Bits>(codes, positions, i, table, d), _mm256_loadu_ps(add + 8 * i)));
    }
  }
}

}  // namespace

bool avx2_available() { return cpu_isa() >= CpuIsa::kAvx2; }

void multiply_add_2of4_avx2(const SbmmLayout& l, const float* x, std::int64_t n, std::int64_t x_stride, float* y,
                            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  if (l.bits == 4)
    multiply_add_bits<4>(l, x, n, x_stride, y, y_stride, row_begin, row_end);
  else
    multiply_add_bits<2>(l, x, n, x_stride, y, y_stride, row_begin, row_end);
}

void decode_rows_2of4_avx2(const SbmmLayout& l, std::int64_t begin, std::int64_t end, float* out, const float* plus) {
  if (l.bits == 4)
    decode_bits<4>(l, begin, end, out, plus);
  else
    decode_bits<2>(l, begin, end, out, plus);
}

// --- AVX-512: sixteen columns (two position bytes) per vector -------------

#define FLEET_AVX512 __attribute__((target("avx512f,avx2,fma")))
// GCC 12's AVX-512 intrinsics fill unused operands with a self-initialised
// "undefined" vector, which -Wuninitialized reports wherever they inline.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

// A row's kept lanes, one 16-bit mask per 16 columns (two position bytes):
// bit c is set where column c is kept. Each nibble of a position byte names
// the two kept columns of a group of four; a 16-entry table turns it into
// their 4-bit mask, 32 bytes at a time (AVX2 byte shuffles). `masks` holds
// (chunks + 1) / 2 entries; with an odd number of chunks the last entry has
// only its lower byte.
FLEET_AVX512 void row_masks(const std::uint8_t* positions, std::int64_t chunks, std::uint16_t* masks) {
  // Per nibble (first position in bits 0-1, second in bits 2-3): the group's kept columns.
  const __m256i group_mask = _mm256_setr_epi8(1, 3, 5, 9, 3, 2, 6, 10, 5, 6, 4, 12, 9, 10, 12, 8,  //
                                              1, 3, 5, 9, 3, 2, 6, 10, 5, 6, 4, 12, 9, 10, 12, 8);
  const __m256i low = _mm256_set1_epi8(0x0F);
  auto* out = reinterpret_cast<std::uint8_t*>(masks);
  std::int64_t b = 0;
  for (; b + 32 <= chunks; b += 32) {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(positions + b));
    const __m256i first = _mm256_shuffle_epi8(group_mask, _mm256_and_si256(p, low));
    const __m256i second = _mm256_shuffle_epi8(group_mask, _mm256_and_si256(_mm256_srli_epi16(p, 4), low));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b), _mm256_or_si256(first, _mm256_slli_epi16(second, 4)));
  }
  static constexpr std::uint8_t kGroupMask[16] = {1, 3, 5, 9, 3, 2, 6, 10, 5, 6, 4, 12, 9, 10, 12, 8};
  for (; b < chunks; ++b)
    out[b] = static_cast<std::uint8_t>(kGroupMask[positions[b] & 15] | kGroupMask[positions[b] >> 4] << 4);
  if (chunks % 2 == 1) out[chunks] = 0;
}

// Columns [16j, 16j + 16) of one row as `lut[code]` where kept, 0
// elsewhere. The pair's eight codes, in column order (the constructor puts
// each group's two in that order), are shifted to the bottom of lanes 0-7
// and looked up in a 16-entry table of floats (permutes read the low four
// bits of each lane, so the bits of the next codes above need no masking;
// 2-bit tables repeat every four entries); the kept lanes of `mask` then
// take them in order.
template <int Bits>
FLEET_AVX512 inline __m512 chunk_pair(const std::uint8_t* codes, std::int64_t j, __mmask16 mask, __m512 lut) {
  std::int32_t word;
  std::memcpy(&word, codes + (Bits == 4 ? 4 * j : 2 * j), sizeof word);  // the buffer is padded
  const __m512i shift = Bits == 4 ? _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0)
                                  : _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 values = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi32(word), shift), lut);
  return _mm512_maskz_expand_ps(mask, values);
}

// The per-thread buffer of a row's masks (row_masks).
inline std::uint16_t* mask_buffer(std::int64_t cols) {
  thread_local std::vector<std::uint16_t> buffer;
  const auto pairs = static_cast<std::size_t>((cols / 8 + 1) / 2);
  if (buffer.size() < pairs) buffer.resize(pairs);
  return buffer.data();
}

// The 16-entry table of a row: scale · (code - zero) for each code (scale 1
// for the products, which apply it to the finished sums), computed with the
// same float operations as the portable decoder.
template <int Bits>
FLEET_AVX512 inline __m512 code_table(float scale, float zero) {
  const __m512i codes = _mm512_and_si512(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32((1 << Bits) - 1));
  return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(codes), _mm512_set1_ps(zero)), _mm512_set1_ps(scale));
}

// R input rows (at most 8) times one output row, as row_block with vectors
// of sixteen: two accumulators per input row, added in a fixed order.
template <int Bits, int R>
FLEET_AVX512 void row_block512(const SbmmLayout& l, std::int64_t o, const float* x, std::int64_t x_stride, float* y,
                               std::int64_t y_stride, std::uint16_t* masks) {
  const std::int64_t chunks = l.cols / 8, pairs = chunks / 2;
  const std::uint8_t* codes = l.codes + o * (l.cols / 2 * Bits / 8);
  row_masks(l.indices + o * chunks, chunks, masks);
  const __m512 lut = code_table<Bits>(1.0f, l.zeros[o]);
  __m512 even[R], odd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  std::int64_t j = 0;
  for (; j + 2 <= pairs; j += 2) {
    const __m512 a = chunk_pair<Bits>(codes, j, _load_mask16(masks + j), lut);
    const __m512 b = chunk_pair<Bits>(codes, j + 1, _load_mask16(masks + j + 1), lut);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_fmadd_ps(a, _mm512_loadu_ps(x + r * x_stride + 16 * j), even[r]);
      odd[r] = _mm512_fmadd_ps(b, _mm512_loadu_ps(x + r * x_stride + 16 * j + 16), odd[r]);
    }
  }
  for (; 2 * j < chunks; ++j) {  // one whole pair, a lone chunk, or both
    const bool last = 2 * j + 1 == chunks;
    const __m512 a = chunk_pair<Bits>(codes, j, _load_mask16(masks + j), lut);
    const __mmask16 lanes = last ? 0x00FF : 0xFFFF;  // x's row may end after eight columns
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      even[r] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(lanes, x + r * x_stride + 16 * j), even[r]);
  }
  const float scale = l.scales[o];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) y[r * y_stride + o] += scale * _mm512_reduce_add_ps(_mm512_add_ps(even[r], odd[r]));
}

template <int Bits>
FLEET_AVX512 void multiply_add_bits512(const SbmmLayout& l, const float* x, std::int64_t n, std::int64_t x_stride,
                                       float* y, std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  for (std::int64_t r0 = 0; r0 < n; r0 += 8) {
    const float* xr = x + r0 * x_stride;
    float* yr = y + r0 * y_stride;
    const auto rows = std::min<std::int64_t>(8, n - r0);
    std::uint16_t* masks = mask_buffer(l.cols);
    for (std::int64_t o = row_begin; o < row_end; ++o) switch (rows) {
        case 1:
          row_block512<Bits, 1>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 2:
          row_block512<Bits, 2>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 3:
          row_block512<Bits, 3>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 4:
          row_block512<Bits, 4>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 5:
          row_block512<Bits, 5>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 6:
          row_block512<Bits, 6>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        case 7:
          row_block512<Bits, 7>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
        default:
          row_block512<Bits, 8>(l, o, xr, x_stride, yr, y_stride, masks);
          break;
      }
  }
}

// As decode_bits, sixteen columns per store, from a table of the row's
// sixteen values: bit for bit the portable decoder's values.
template <int Bits>
FLEET_AVX512 void decode_bits512(const SbmmLayout& l, std::int64_t begin, std::int64_t end, float* out,
                                 const float* plus) {
  const std::int64_t chunks = l.cols / 8;
  std::uint16_t* masks = mask_buffer(l.cols);
  for (std::int64_t o = begin; o < end; ++o) {
    const std::uint8_t* codes = l.codes + o * (l.cols / 2 * Bits / 8);
    row_masks(l.indices + o * chunks, chunks, masks);
    const __m512 lut = code_table<Bits>(l.scales[o], l.zeros[o]);
    float* dst = out + (o - begin) * l.cols;
    const float* add = plus == nullptr ? nullptr : plus + (o - begin) * l.cols;
    const RowAhead ahead(l, Bits, o, end, add, (chunks + 1) / 2);
    for (std::int64_t j = 0; 2 * j < chunks; ++j) {
      ahead.step(j);
      const bool last = 2 * j + 1 == chunks;
      const __mmask16 lanes = last ? 0x00FF : 0xFFFF;
      __m512 v = chunk_pair<Bits>(codes, j, _load_mask16(masks + j), lut);
      if (add != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, add + 16 * j));
      _mm512_mask_storeu_ps(dst + 16 * j, lanes, v);
    }
  }
}

}  // namespace

bool avx512_available() { return cpu_isa() >= CpuIsa::kAvx512; }

void multiply_add_2of4_avx512(const SbmmLayout& l, const float* x, std::int64_t n, std::int64_t x_stride, float* y,
                              std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  if (l.bits == 4)
    multiply_add_bits512<4>(l, x, n, x_stride, y, y_stride, row_begin, row_end);
  else
    multiply_add_bits512<2>(l, x, n, x_stride, y, y_stride, row_begin, row_end);
}

void decode_rows_2of4_avx512(const SbmmLayout& l, std::int64_t begin, std::int64_t end, float* out, const float* plus) {
  if (l.bits == 4)
    decode_bits512<4>(l, begin, end, out, plus);
  else
    decode_bits512<2>(l, begin, end, out, plus);
}

#pragma GCC diagnostic pop
#undef FLEET_AVX512
#undef FLEET_AVX2

#else  // not x86-64: the portable kernels in sbmm.cpp run everywhere

bool avx2_available() { return false; }
bool avx512_available() { return false; }

namespace {
[[noreturn]] void no_x86() { throw std::logic_error("x86 SBMM kernel called on a CPU without it"); }
}  // namespace

void multiply_add_2of4_avx2(const SbmmLayout&, const float*, std::int64_t, std::int64_t, float*, std::int64_t,
                            std::int64_t, std::int64_t) {
  no_x86();
}
void decode_rows_2of4_avx2(const SbmmLayout&, std::int64_t, std::int64_t, float*, const float*) { no_x86(); }
void multiply_add_2of4_avx512(const SbmmLayout&, const float*, std::int64_t, std::int64_t, float*, std::int64_t,
                              std::int64_t, std::int64_t) {
  no_x86();
}
void decode_rows_2of4_avx512(const SbmmLayout&, std::int64_t, std::int64_t, float*, const float*) { no_x86(); }

#endif

}  // namespace fleet::deltazip::x86
