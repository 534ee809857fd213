#pragma once
// PairedRowsLayout: a rows × cols matrix of 16-bit values stored the way oneDNN's bfloat16 matmul
// kernels read their right operand (the layouts it names like BA16a64b2a): the rows padded to a
// multiple of `row_block`, the matrix cut into row_block × col_block tiles, and inside a tile each
// pair of rows interleaved column by column — (k, n), (k + 1, n), (k, n + 1), ... — which is the
// order the dot-product instructions consume. Handing the kernel its operand in that layout saves
// the copy it otherwise makes of a plain operand on every call. The padding is zero and stays so:
// only the matrix's elements are ever written.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lockstep {

struct PairedRowsLayout {
  int64_t rows = 0, cols = 0;
  // A tile's extent; row_block is even.
  int64_t row_block = 0, col_block = 0;
  // Elements from one tile to the next along the rows and along the columns.
  int64_t row_tile_stride = 0, col_tile_stride = 0;
  // Elements the layout spans, padding included.
  int64_t size = 0;

  bool operator==(const PairedRowsLayout&) const = default;

  // Where element (k, n) of the matrix lives. The blocks are powers of two (oneDNN's are; see
  // valid()), so this takes no division.
  int64_t offset(int64_t k, int64_t n) const {
    const int row_shift = __builtin_ctzll(static_cast<uint64_t>(row_block));
    const int col_shift = __builtin_ctzll(static_cast<uint64_t>(col_block));
    const int64_t kin = k & (row_block - 1);
    return (k >> row_shift) * row_tile_stride + (n >> col_shift) * col_tile_stride +
           (kin >> 1) * (2 * col_block) + (n & (col_block - 1)) * 2 + (kin & 1);
  }
  // The shape offset() assumes: blocks that are powers of two, rows in pairs.
  bool valid() const {
    auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    return rows > 0 && cols > 0 && pow2(row_block) && row_block >= 2 && pow2(col_block) && size > 0;
  }
};

namespace detail {
#if defined(__x86_64__)
typedef uint16_t PairedRowsHalves __attribute__((vector_size(32)));
typedef uint32_t PairedRowsWords __attribute__((vector_size(64)));
#endif
}  // namespace detail

// Stores `count` 16-bit values — elements `begin`, begin + 1, ... of the matrix in row-major order
// — at their places in `dst`, which holds the matrix in `layout`. Each value is its own store: two
// threads may write the two rows of a pair at once. kLanes is the float32 lanes of the build that
// inlines it (16: x86-64-v4, whose masked 16-bit stores write sixteen values at a time; anything
// else stores them one by one), as keras/optimizers/elementwise_rule.h's stream_floats; the store
// is inline assembly for the same reason.
template <int kLanes>
[[gnu::always_inline]] inline void store_paired_rows(const PairedRowsLayout& layout, uint16_t* dst,
                                                     int64_t begin, const uint16_t* values,
                                                     int64_t count) {
  int64_t k = begin / layout.cols, n = begin - k * layout.cols;
  while (count > 0) {
    const int64_t in_tile = layout.col_block - (n & (layout.col_block - 1));
    int64_t run = layout.cols - n < in_tile ? layout.cols - n : in_tile;
    if (run > count) run = count;
    const int64_t odd = k % 2;
    // The run's values go to every other element from here: one row of its pairs.
    uint16_t* pairs = dst + layout.offset(k, n) - odd;
    int64_t j = 0;
#if defined(__x86_64__)
    if constexpr (kLanes == 16) {
      const uint32_t mask = odd != 0 ? 0xAAAAAAAAu : 0x55555555u;
      for (; j + 16 <= run; j += 16) {
        detail::PairedRowsHalves v;
        std::memcpy(&v, values + j, sizeof v);
        detail::PairedRowsWords w = __builtin_convertvector(v, detail::PairedRowsWords);
        if (odd != 0) w <<= 16;
        asm("vmovdqu16 %1, %0%{%2%}"
            : "+m"(*reinterpret_cast<detail::PairedRowsWords*>(pairs + 2 * j))
            : "v"(w), "Yk"(mask));
      }
    }
#endif
    for (; j < run; ++j) pairs[2 * j + odd] = values[j];
    values += run;
    count -= run;
    n += run;
    if (n == layout.cols) {
      n = 0;
      ++k;
    }
  }
}

// The word a column's pair of values makes in a paired layout on a little-endian CPU: row k's
// value in the low half, row k + 1's in the high half.
inline uint32_t row_pair_word(uint16_t row_k, uint16_t row_k1) {
  return static_cast<uint32_t>(row_k) | (static_cast<uint32_t>(row_k1) << 16);
}

// Stores rows k and k + 1 (k even) of columns [n, n + count) — a[j] and b[j] the values of column
// n + j — at their places in `dst`, which holds the matrix in `layout`: the two values of a column
// are adjacent there, so each pair goes as one 32-bit word (row k's value in its low half) and
// the loop vectorises without permutes. Only for a pair of rows one thread writes whole.
inline void store_row_pair(const PairedRowsLayout& layout, uint16_t* dst, int64_t k, int64_t n,
                           const uint16_t* a, const uint16_t* b, int64_t count) {
  typedef uint32_t Word __attribute__((may_alias));
  while (count > 0) {
    const int64_t in_tile = layout.col_block - (n & (layout.col_block - 1));
    const int64_t run = count < in_tile ? count : in_tile;
    uint16_t* pairs = dst + layout.offset(k, n);
    if constexpr (std::endian::native == std::endian::little) {
      Word* words = reinterpret_cast<Word*>(pairs);
      for (int64_t j = 0; j < run; ++j) words[j] = row_pair_word(a[j], b[j]);
    } else {
      for (int64_t j = 0; j < run; ++j) {
        pairs[2 * j] = a[j];
        pairs[2 * j + 1] = b[j];
      }
    }
    a += run;
    b += run;
    n += run;
    count -= run;
  }
}

// Copies elements [begin, begin + count) of the matrix in row-major order from one buffer in
// `layout` to another.
inline void copy_paired_rows(const PairedRowsLayout& layout, const uint16_t* src, uint16_t* dst,
                             int64_t begin, int64_t count) {
  for (int64_t e = begin; e < begin + count; ++e) {
    const int64_t o = layout.offset(e / layout.cols, e % layout.cols);
    dst[o] = src[o];
  }
}

}  // namespace lockstep
