// FP8 on the CPU: the e4m3 format, the three quantisation schemes of stage 09 and the layouts the
// kernels read, written as plainly as they can be so that the GPU's quantisation kernels
// (quantize.cu) can be held to them byte for byte.
//
// e4m3 (the OCP "FP8 E4M3", PTX's .e4m3): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities, one NaN pattern a sign (S.1111.111). Largest finite 448 = 1.75·2^8; smallest normal
// 2^-6; subnormals in steps of 2^-9. Rounding to nearest-even, so the unit roundoff is u = 2^-4:
// a value in the normal range comes back with a relative error of at most 1/16.
//
// Quantising a tensor x: a scale s (the "descale": x ≈ byte · s) chosen so that the largest |x| of
// its group lands on 448, then byte = e4m3(x · 448/amax). Groups (stage 09's schemes):
//   per tensor  one amax for all B·H·N·d values of Q (of K, of V)
//   per block   one amax a block of rows of a head: Br = 128 rows of Q, Bc = 128 rows of K and of V,
//               the kernel's tiles, so that a tile needs one scale
//   incoherent  before either: each row of Q and of K multiplied by diag(signs)·H/√d, H the d × d
//               Hadamard matrix and the signs random ±1 (the same for Q and K). That matrix is
//               orthogonal, so Q·Kᵀ is unchanged in exact arithmetic, and an outlier in one channel
//               is spread over all d channels of its row.
// Whatever the scheme, the scales are stored a block apiece (per tensor: the same value in every
// block), so that the attention kernel is one kernel for all four.
//
// V centred (centre_v, the schemes' "_centred" form): each column c of a head's V has its mean v̄_c
// over the N keys subtracted before quantisation, and the attention adds v̄ to O at the end. Exact:
// each row of P sums to 1, so P·(V − 1·v̄ᵀ) + v̄ = P·V. It keeps the terms of P̃·V of both signs,
// whose sum the FP8 tensor cores' short accumulator lets drift when one accumulator takes all N
// keys: the experiment O on the tensor cores needs it (chapter 09). The default kernel, whose fresh
// accumulator a key block does not drift, does not, and its quantisation skips the extra pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../06_flash_v2/algorithm.hpp"  // Shape
#include "hd.hpp"

namespace attention::fp8 {

constexpr float kE4m3Max = 448.0f;
// The smallest amax a scale is made from. Below 2^-119, 448/amax overflows float (448·2^120 > FLT_MAX), and
// x·inf is ±inf, or NaN for a 0: a block whose values all lie below it is scaled as if its amax were 2^-119,
// coarser but never NaN. Only bf16 inputs get there (fp16's smallest value is 2^-24).
constexpr float kMinAmax = 0x1p-119f;
COURSE_HD inline float scale_amax(float amax) { return amax > 0.0f && amax < kMinAmax ? kMinAmax : amax; }
// The attention keeps o in units of one key block's V descale and steps it by two blocks' ratio (fp8_attention.cu):
// a ratio of at most 2^64 keeps o (below 448·2^8·N, 2^37 at N = 2^20) and l far from fp32's 2^128. Only per-block
// scales of bf16 V whose blocks' magnitudes differ by some 19 orders pass it; check_quantized refuses them. An
// all-zero block's descale is 1 and counts: beside blocks above about 8e21 that is a real overflow; beside blocks
// below about 2e-17 (bf16 only) a refusal the kernel would not need (o only shrinks into the larger unit).
constexpr double kMaxVScaleSpan = 0x1p64;
// The largest ratio between `blocks` positive descales (one head's V).
double v_scale_span(const float* v_scale, int blocks);
constexpr double kUnitRoundoff = 1.0 / 16.0;  // 2^-(3 mantissa bits + 1)
// The rows a scale covers in the per-block scheme: the kernel's key blocks (Bc) of K and V, and 128
// rows of Q (the tile at d = 128; at d = 64 a tile has 192 rows, and each warpgroup's 64 lie in one block).
constexpr int kScaleRows = 128;
// The FP8 kernel's tiles: Br = 128 query rows (two consumer warpgroups) at d = 128, 192 (three) at
// d = 64, key blocks of 128; causal tiles laid from the last row back (stage 08's rung 6).
inline Tiles attention_tiles(const Shape& s) { return {s.d == 64 ? 192 : 128, kScaleRows, true}; }

// Round to the nearest e4m3 value (ties to even), saturating at ±448 (PTX's .satfinite): values
// beyond the range become ±448, NaN stays NaN (0x7F, or 0xFF with the sign).
std::uint8_t to_e4m3(float x);
float from_e4m3(std::uint8_t b);

// P̃ without the exponential unit (the experiments fp8_*_lin and fp8_*_wide_lin; chapter 09). fp16's bit pattern,
// read as an integer, is about 1024·(log₂ v + 15), so 2^x's pattern is y = 1024·(x + 15) − δ, which the kernels
// write into a float's low 16 bits: t = clamp(S·a + b, 0, 1) (one FFMA.SAT), then t·R + 1.5·2²³ (one FFMA, whose
// ulp of 1 rounds y to an integer). R = 0x7BFF, fp16's largest finite pattern; δ = 44/1024 of a binade centres
// the linear mantissa's error (1 + f for 2^f, up to 6.1% high) at about ±3%. With x = S·c − base:
// a = c·1024/R and b = (1024·(15 − base) − δ)/R. The fp16 value is then rounded to e4m3 as any other.
constexpr float kLinR = 31743.0f, kLinMagic = 12582912.0f, kLinDelta = 44.0f;
COURSE_HD inline float lin_a(float c) { return c * (1024.0f / kLinR); }
COURSE_HD inline float lin_b(float base) { return (1024.0f * (15.0f - base) - kLinDelta) * (1.0f / kLinR); }
// The CPU's replica of the kernels' arithmetic: the fp16 value whose pattern the two FFMAs leave (clamp as
// FFMA.SAT: NaN and −∞ give 0), and that value rounded to e4m3 (cvt.rn.satfinite.e4m3x2.f16x2).
float lin_fp16(float s, float a, float b);
std::uint8_t lin_e4m3(float s, float a, float b);
// lin_fp16's largest relative error against 2^x (−2.97% to +3.07%; test_cpu holds it to this). A lin kernel's l sums
// such P̃, on average 1% high: O = Σ P̃·v / Σ P̃ divides that away, L = m + log l does not, and may sit up to
// log(1 + this) from plain FP8's L (whose row sums are exact); the GPU tests add that to L's bound for those kernels.
constexpr double kLinMaxRelError = 0.031;

enum class Granularity { tensor, block };
struct Scheme {
  Granularity granularity = Granularity::tensor;
  bool incoherent = false;
  bool centre_v = false;     // true: V − v̄ quantised, v̄ added to O (O on the tensor cores needs it)
  std::string name() const;  // "per_tensor", "per_block", "per_tensor_hadamard", "per_block_hadamard"
                             // (+ "_centred" with centre_v)
};
const std::vector<Scheme>& schemes();  // the four, in the chapter's order (V not centred)
Scheme centred(Scheme s);              // the same with centre_v

// d random signs ±1 (the incoherent processing's diagonal), from `seed`.
std::vector<float> random_signs(int d, std::uint64_t seed);

// x := H·x for a row of d values (d a power of two), H the unnormalised Hadamard matrix (entries
// ±1), by the fast Walsh–Hadamard transform: log₂ d rounds of butterflies (a, b) -> (a + b, a − b)
// at strides 1, 2, 4, ..., d/2, in float. The GPU does the same additions in the same order.
void fwht(float* x, int d);

// One tensor (Q, K or V: B·H heads of N rows × d) in e4m3, with its scales.
struct Quantized {
  int heads = 0, N = 0, d = 0;
  std::vector<std::uint8_t> bytes;  // heads × N × d, row-major, as the input
  std::vector<float> scale;         // heads × ⌈N / kScaleRows⌉ descales: value = from_e4m3(byte) · scale
  int blocks() const { return (N + kScaleRows - 1) / kScaleRows; }
  float descale(int h, int row) const { return scale[std::size_t(h) * blocks() + row / kScaleRows]; }
  double value(int h, int row, int c) const {
    return double(from_e4m3(bytes[(std::size_t(h) * N + row) * d + c])) * descale(h, row);
  }
};

// The rows of x (heads × N × d floats) as the kernels see them before quantisation: themselves, or
// with incoherent processing (signs non-empty) diag(signs)·H·x / √d, in float, as fwht.
std::vector<float> transform_rows(const std::vector<float>& x, int d, const std::vector<float>& signs);
// The mean of each column of each head of V (heads × N × d): heads × d floats, summed as the GPU
// does (quantize.cu): in each block of kScaleRows rows, 8 groups of 16 consecutive rows summed in
// order, the 8 group sums added in order; the blocks' sums added in order; divided by N. Throws
// UsageError on NaN or ±inf.
std::vector<float> column_means(const std::vector<float>& V, int heads, int N, int d);
// V − v̄ (each head's rows less its column means), in float.
std::vector<float> centre_columns(const std::vector<float>& V, const std::vector<float>& mean, int heads, int N, int d);
// Quantises x (already transformed) with one scale per block of kScaleRows rows, or one for all.
// amax = 0 gives the scale 1 (all bytes 0). Throws UsageError on NaN or ±inf: a scale made from
// them would turn every value of its group into NaN.
Quantized quantize(const std::vector<float>& x, int heads, int N, int d, Granularity g);

// V for the kernel's P·V: the FP8 tensor cores take both operands K-major (the sum's index
// contiguous), and the sum of P·V runs over keys. So V is stored transposed: for each head, d rows
// of Np = ⌈N/32⌉·32 bytes, row c holding channel c of every key. And within each group of 32 keys,
// in the order in which a thread's P arrives from S's accumulators (see key_position): the
// quantisation kernel writes it so, for free, where FlashAttention-3 transposes V in shared memory.
// The positions of no key, key_position(k) for N ≤ k < Np, hold 0 (key_position permutes each group
// of 32, so they need not be the last positions).
COURSE_HD inline int padded_keys(int N) { return (N + 31) / 32 * 32; }
// Where key k goes in its row of Vᵀ. S's accumulator gives thread t of a quad, in a row, the keys
// 8n + 2t and 8n + 2t + 1 of each 8-key column tile n; the e4m3 A operand of a 32-key step wants
// four consecutive keys 4t..4t+3 (and 16 + 4t..) in each of its 32-bit registers. Rather than move
// bytes between threads, each thread packs what it has (keys 2t, 2t+1, 8+2t, 9+2t into one
// register) and V's keys are laid in that order: position 16h + 4t + 2a + b holds key
// 16h + 8a + 2t + b (h, a, b ∈ {0, 1}, t ∈ 0..3), in each group of 32.
COURSE_HD inline int key_position(int k) {
  const int w = k & 31, h = (w >> 4) & 1, a = (w >> 3) & 1, t = (w >> 1) & 3, b = w & 1;
  return (k & ~31) + 16 * h + 4 * t + 2 * a + b;
}
std::vector<std::uint8_t> transpose_v(const Quantized& V);

}  // namespace attention::fp8
