#pragma once
// The two products of bfloat16 tensors' attention (attention.cpp: the scores and the weighted
// sums of rows) through AVX512_BF16's dot product, vdpbf16ps: per float32 lane it multiplies two
// pairs of bfloat16 values and adds both products to the lane, the odd pair's first, each sum
// rounded to nearest even — twice the multiply-adds of a fused multiply-add per instruction. The
// products of two bfloat16 values are exact in float32, so the instruction computes what two fused
// multiply-adds in that order do, and attention.cpp's loops add in that order (in_sum_order): the
// two give the same bits. The instruction reads subnormal inputs as zero and flushes subnormal sums
// to zero, as the training step's threads do anyway (lockstep/core/denormals.h); elsewhere a
// subnormal is where they may differ.
//
// Both read their bfloat16 operands as pairs of adjacent terms of the sum packed in 32-bit words,
// into scratch the caller provides (sizes below); a term past the last of an odd count is zero.
#include <cstdint>

namespace lockstep::ops::detail {

// Whether the products below may run here: x86-64 with AVX512_BF16, under the ISA cap
// (lockstep/core/cpu_isa.h), with the loops' AVX-512 build (16 float32 lanes).
bool attention_bf16_dot_available();

// yt[s, t] = alpha · Σ_d a[s, d] · b[t, d] (float32) for s < S and t < ld, ld a multiple of 16,
// zero for T <= t < ld: the transposed scores as attention.cpp lays them out. Rows of a and b
// are a_rs and b_rs elements apart. `pairs`: (D + 1) / 2 × ld words of scratch.
void scores_bf16_dot(const uint16_t* a, int64_t a_rs, int64_t S, const uint16_t* b, int64_t b_rs,
                     int64_t T, int64_t D, int64_t ld, float alpha, uint32_t* pairs, float* yt);

// y[i, c] = alpha · Σ_{j < J} w[i·wi + j·wj] · x[j, c] for i < I and c < D, stored rounded to
// bfloat16 (nearest even; a NaN stays a quiet NaN); w float32 holding bfloat16 values, rows of x
// and y x_rs and y_rs elements apart. `w_pairs`: ((I + 15) / 16 · 16) × (J + 1) / 2 words;
// `x_pairs`: (J + 1) / 2 × D words.
void weighted_rows_bf16_dot(const float* w, int64_t wi, int64_t wj, int64_t I, int64_t J,
                            const uint16_t* x, int64_t x_rs, int64_t D, float alpha, uint16_t* y,
                            int64_t y_rs, uint32_t* w_pairs, uint32_t* x_pairs);

}  // namespace lockstep::ops::detail
