// The quantisation kernels: fp16 or bf16 Q, K, V to e4m3 and their descales, the same bytes as the
// CPU's quantize (fp8.cpp) computes, and V written transposed for the kernel's P·V.
//
// One thread block takes one scale block (128 rows of one head) of one tensor (blockIdx.z: Q, K,
// V); each of its 8 warps 16 rows, a row across the warp's 32 lanes (d/32 values a lane, one 8- or
// 4-byte load) or, for Q and K with the transform, across 4 (fwht_quad). A warp issues the loads of all
// its 16 rows before it uses any: without the transform the kernel is bound by memory, and the bytes in
// flight are what keeps the memory busy. With it, a row across 32 lanes took 20 shuffles at d = 128,
// which added their time to the bytes'; across 4 lanes (below), 8.
// A row with incoherent processing (Q and K): times the signs, then the fast Walsh–Hadamard transform in
// registers, each butterfly (a, b) -> (a + b, a − b) as fwht does on the CPU, in the same order of strides;
// then times 1/√d. O(d log d) a row: 7 rounds at d = 128. Such a row goes across 4 lanes, not 32 (see
// fwht_quad): 2 of the rounds between lanes by __shfl_xor_sync, where 32 lanes needed 5.
//
// Per block: the block's amax (warp maxima, then across the warps in shared memory), then the
// bytes: one pass, each input read once. Per tensor: the same kernel twice, first only for the
// amax (atomicMax on the float's bits, which orders non-negative floats as it orders ints), then
// quantising with that amax: the inputs read twice.
//
// V centred (fp8.hpp): before either, V's column means v̄. v_column_sums takes the same blocks of 128
// rows (each warp's 16 rows summed in order in its lanes, the 8 warps' sums added in order in shared
// memory), v_column_mean one (head, column) a thread (the blocks' sums added in order, divided by
// N): fixed orders, so the CPU's column_means gives the same floats, and the quantisation of V
// subtracts v̄ from each row as it reads it. The price: V read once more.
//
// IO (bytes between the SMs and L2, e = 2 for the 16-bit inputs), per tensor of n = B·H·N·d values:
// per block n·e read + n written (Vᵀ: B·H·d·Np, Np = N rounded up to 32) + 4 bytes a scale block;
// per tensor another n·e read; centring V another n·e read of V, its blocks' sums (4·d bytes a
// block) written and read, v̄ (4·d bytes a head) written and read by each block of V.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "gpu.hpp"
#include "hopper.cuh"
#include "kernels.cuh"

namespace attention::fp8 {

namespace {

constexpr int kWarps = 8, kRowsPerWarp = kScaleRows / kWarps;  // 16

// The incoherent processing's signs as bits (1: −1), and where each tensor goes.
struct SignBits {
  uint32_t bits[4];
};
struct Tensors {
  const void* in[3];
  uint8_t* out[3];  // Q, K, Vt
  float* scale[3];
  float* amax;  // [3]
  int* bad;
  const float* v_mean;  // heads × D: subtracted from V's rows
};

// A lane's E = D/32 consecutive 16-bit values of one row: one 8-byte load at d = 128, one 4-byte load at
// d = 64 (zeros past the last row), and the same as floats.
template <int E>
__device__ inline void load_part(const void* p, bool valid, uint32_t (&w)[E / 2]) {
  if constexpr (E == 4) {
    const uint2 u = valid ? *static_cast<const uint2*>(p) : make_uint2(0u, 0u);
    w[0] = u.x;
    w[1] = u.y;
  } else {
    w[0] = valid ? *static_cast<const uint32_t*>(p) : 0u;
  }
}
__device__ inline float2 to_float2(uint32_t w, __half) {
  __half2 h;
  memcpy(&h, &w, sizeof h);
  return __half22float2(h);
}
__device__ inline float2 to_float2(uint32_t w, __nv_bfloat16) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof h);
  return __bfloat1622float2(h);
}
template <class T, int E>
__device__ inline void unpack_part(const uint32_t (&w)[E / 2], float (&x)[E]) {
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    const float2 f = to_float2(w[j], T{});
    x[2 * j] = f.x;
    x[2 * j + 1] = f.y;
  }
}

// Byte i of each of a, b, c, d, as one word (a's byte lowest): a 4 × 4 byte transpose's one row.
__device__ inline uint32_t byte_column(uint32_t a, uint32_t b, uint32_t c, uint32_t d, int i) {
  const uint32_t sel = uint32_t(i) | uint32_t(i + 4) << 4;  // the result's bytes 0 and 1: x's byte i, y's byte i
  return __byte_perm(__byte_perm(a, b, sel), __byte_perm(c, d, sel), 0x5410);
}

// Incoherent processing of Q and K, by "quads": a row across 4 lanes (D/4 values a lane, 8 rows of a warp at a
// time), where a row across 32 lanes pays 5 rounds of shuffles (20 a row at d = 128), the bound of the kernel.
// Lane p = lane % 4 of a row's four holds its chunks j·4 + p of 8 values (j < D/32): element c = 32j + 8p + o,
// so each 16-byte load of the four lanes is 64 contiguous bytes. In fwht's order of strides, 1, 2, 4 are
// inside a chunk, 8 and 16 between the four lanes (2 rounds of shuffles: 8 a row at d = 128), 32 and 64
// between a lane's chunks; the same additions in the same order, so the bytes stay the CPU's.
// The values of a warp's pass (8 rows) are x(j·8 + o), kept in the same registers as the rows' layout's.
template <int D, class At>
__device__ inline void fwht_quad(At x, int p) {
  constexpr int kVals = D / 4;  // a lane's values of the row: value 8j + o is element 32j + 8p + o
  auto inside = [&](int bit) {  // one stride's butterflies inside the lane: values k and k + bit
#pragma unroll
    for (int k = 0; k < kVals; ++k)
      if ((k & bit) == 0) {
        const float a = x(k), b = x(k + bit);
        x(k) = a + b;
        x(k + bit) = a - b;
      }
  };
  inside(1), inside(2), inside(4);  // element strides 1, 2, 4: within a chunk
#pragma unroll
  for (int q = 1; q < 4; q *= 2)  // strides 8, 16: between the row's four lanes
#pragma unroll
    for (int k = 0; k < kVals; ++k) {
      const float partner = __shfl_xor_sync(0xffffffffu, x(k), q);
      x(k) = (p & q) == 0 ? x(k) + partner : partner - x(k);
    }
#pragma unroll
  for (int bit = 8; bit < kVals; bit *= 2) inside(bit);  // strides 32 (and 64 at d = 128): between chunks
}

// At least 2 blocks an SM, so up to 128 registers a thread: with all 16 rows loaded first, the incoherent
// and centred kernels need up to 111 (ptxas's own choice, 80, spilled). Those above 85 registers fit 2 blocks an SM.
// The transform at d = 128, not centred, asks for 3 (80 registers, no spill): at 92 it fitted 2, and Nsight Compute
// found it bound by latency there (25% occupancy: 1.2 warps of 3.8 ready a scheduler, the issue slots 56% busy, the
// memory 54%; chapter 09). What it should buy: the occupancy of per block without the transform (37.5%), whose
// kernel reaches 85% of DRAM's peak: per block + Hadamard 0.113 -> 0.085-0.095 ms on an H200. Measured there: 0.097
// ms (3 blocks, 5.7 warps a scheduler where there were 3.8, DRAM 64% busy): narrowly missed. Centred, it spills
// at 80 (16 to 44 bytes), and keeps 2.
template <class T, int D, bool kIncoherent, bool kAmaxOnly, bool kCentreV>
__global__ void __launch_bounds__(kWarps * 32, kIncoherent && !kCentreV && D == 128 ? 3 : 2)
    fp8_quantize(Tensors t, int N, int blocks, bool per_tensor, SignBits signs, float inv_sqrt_d) {
  constexpr int E = D / 32;
  const int z = blockIdx.z, b = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // (Chosen by ?: rather than indexed by z, which would copy the arrays to local memory.)
  auto pick = [z](auto a, auto b, auto c) { return z == 0 ? a : z == 1 ? b : c; };
  const T* x = static_cast<const T*>(pick(t.in[0], t.in[1], t.in[2])) + size_t(h) * N * D;
  const bool transform = kIncoherent && z < 2;  // Q and K; V as it is, less v̄
  float mu[E];  // kCentreV: V's column means, subtracted (the other tensors, or without centring: none)
#pragma unroll
  for (int i = 0; i < E; ++i) mu[i] = kCentreV && z == 2 ? t.v_mean[size_t(h) * D + lane * E + i] : 0.0f;
  // The warp's 16 rows: all their loads issued before the first is used. v and raw hold them in the rows'
  // layout (v[r][i]: element lane·E + i of row r) or, with the transform, in the quads' (value k of pass π
  // is v's (π·E·8 + k)-th float, its chunk j = k / 8 the raw words 4·(π·E + j) .. + 3): the same registers.
  uint32_t raw[kRowsPerWarp][E / 2];
  float v[kRowsPerWarp][E];
  auto raw_at = [&](int w) -> uint32_t& { return raw[w / (E / 2)][w % (E / 2)]; };
  auto v_at = [&](int f) -> float& { return v[f / E][f % E]; };
  constexpr int kPasses = kRowsPerWarp / 8, kQuadVals = D / 4;  // the quads: 2 passes of 8 rows, D/4 values a lane
  const int g = lane / 4, p = lane % 4;                          // the quads: a pass's row, the lane within it
  float amax = 0.0f;
  int bad = 0;
  if (transform) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = b * kScaleRows + warp * kRowsPerWarp + pass * 8 + g;
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const T* src = x + size_t(row < N ? row : 0) * D + (j * 4 + p) * 8;
        const uint4 u = row < N ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
        const int w = 4 * (pass * E + j);
        raw_at(w) = u.x, raw_at(w + 1) = u.y, raw_at(w + 2) = u.z, raw_at(w + 3) = u.w;
      }
    }
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      auto at = [&](int k) -> float& { return v_at(pass * kQuadVals + k); };
#pragma unroll
      for (int k = 0; k < kQuadVals; k += 2) {
        const float2 f = to_float2(raw_at((pass * kQuadVals + k) / 2), T{});
        at(k) = f.x, at(k + 1) = f.y;
      }
#pragma unroll
      for (int k = 0; k < kQuadVals; ++k) {
        bad += !isfinite(at(k));
        // element 32j + 8p + o's sign: bit 8p + o of the signs' word j
        if ((signs.bits[k / 8] >> (8 * p + k % 8)) & 1) at(k) = -at(k);
      }
      fwht_quad<D>(at, p);
#pragma unroll
      for (int k = 0; k < kQuadVals; ++k) {
        at(k) *= inv_sqrt_d;
        amax = fmaxf(amax, fabsf(at(k)));
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = b * kScaleRows + warp * kRowsPerWarp + r;
      load_part<E>(x + size_t(row < N ? row : 0) * D + lane * E, row < N, raw[r]);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = b * kScaleRows + warp * kRowsPerWarp + r;
      unpack_part<T, E>(raw[r], v[r]);
#pragma unroll
      for (int i = 0; i < E; ++i) bad += !isfinite(v[r][i]);
      if (kCentreV && z == 2 && row < N)  // (padding rows stay 0: no key)
#pragma unroll
        for (int i = 0; i < E; ++i) v[r][i] -= mu[i];
#pragma unroll
      for (int i = 0; i < E; ++i) amax = fmaxf(amax, fabsf(v[r][i]));
    }
  }
  // The block's amax: the warp's, then the 8 warps' in shared memory.
  __shared__ float warp_amax[kWarps];
  // V only: Vᵀ's D rows of 128 positions, as 8 chunks of 16 bytes a row; chunk q of row c is stored at
  // q ^ ((c / E) % 8), so that the 8 lanes of a store's phase (rows c = lane·E + i) and the 8 threads of a
  // load's phase (one row's 8 chunks) each meet 8 different chunks: all 32 banks, no conflict.
  __shared__ uint4 tile[D][kScaleRows / 16];
#pragma unroll
  for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();
  amax = warp_amax[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) amax = fmaxf(amax, warp_amax[w]);
  if constexpr (kAmaxOnly) {
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(t.amax) + z, __float_as_int(amax));
    return;
  } else {
    if (bad != 0) atomicAdd(t.bad, bad);
    if (per_tensor) amax = t.amax[z];
    amax = scale_amax(amax);
    const float inv = amax > 0.0f ? kE4m3Max / amax : 1.0f;  // as quantize() on the CPU
    if (threadIdx.x == 0)
      pick(t.scale[0], t.scale[1], t.scale[2])[size_t(h) * blocks + b] = amax > 0.0f ? amax / kE4m3Max : 1.0f;
    if (transform) {  // Q, K transformed: 8 bytes a chunk, the four lanes of a row 32 contiguous bytes a store
      uint8_t* out = (z == 0 ? t.out[0] : t.out[1]) + size_t(h) * N * D;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int row = b * kScaleRows + warp * kRowsPerWarp + pass * 8 + g;
        if (row < N)
#pragma unroll
          for (int j = 0; j < E; ++j) {
            auto at = [&](int o) { return v_at(pass * kQuadVals + j * 8 + o) * inv; };
            *reinterpret_cast<uint2*>(out + size_t(row) * D + (j * 4 + p) * 8) =
                make_uint2(hopper::pack_e4m3(at(0), at(1), at(2), at(3)), hopper::pack_e4m3(at(4), at(5), at(6), at(7)));
          }
      }
    } else if (z < 2) {  // Q, K: the rows as they are, E bytes a lane, a warp's 32 lanes one row
      uint8_t* out = (z == 0 ? t.out[0] : t.out[1]) + size_t(h) * N * D;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int row = b * kScaleRows + warp * kRowsPerWarp + r;
        if (row >= N) break;
        if constexpr (E == 4) {
          *reinterpret_cast<uint32_t*>(out + size_t(row) * D + lane * 4) =
              hopper::pack_e4m3(v[r][0] * inv, v[r][1] * inv, v[r][2] * inv, v[r][3] * inv);
        } else {
          *reinterpret_cast<uint16_t*>(out + size_t(row) * D + lane * 2) =
              uint16_t(hopper::pack_e4m3(v[r][0] * inv, v[r][1] * inv, 0.0f, 0.0f));
        }
      }
    } else {  // V: into Vᵀ's rows through shared memory, keys in key_position's order
      // A lane holds its E columns of the warp's 16 keys (zeros past N), which key_position lays out as
      // 16 consecutive positions: position 4t + 2a + b holds key 8a + 2t + b. So each column's 16 bytes are
      // put in order in registers (byte_column: word t is keys 2t, 2t + 1, 8 + 2t, 9 + 2t) and stored as
      // one chunk: 16-byte stores, where one byte at a time had put 32 lanes' stores in one bank.
      uint32_t bytes[kRowsPerWarp];  // key r's E bytes
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if constexpr (E == 4) bytes[r] = hopper::pack_e4m3(v[r][0] * inv, v[r][1] * inv, v[r][2] * inv, v[r][3] * inv);
        else bytes[r] = hopper::pack_e4m3(v[r][0] * inv, v[r][1] * inv, 0.0f, 0.0f);
      }
#pragma unroll
      for (int i = 0; i < E; ++i) {
        uint32_t chunk[4];  // positions 4tq .. 4tq + 3 of column lane·E + i
#pragma unroll
        for (int tq = 0; tq < 4; ++tq)
          chunk[tq] = byte_column(bytes[2 * tq], bytes[2 * tq + 1], bytes[8 + 2 * tq], bytes[9 + 2 * tq], i);
        tile[lane * E + i][warp ^ (lane % 8)] = make_uint4(chunk[0], chunk[1], chunk[2], chunk[3]);
      }
      __syncthreads();
      const int Np = padded_keys(N);
      uint8_t* out = t.out[2] + size_t(h) * D * Np;
      const int k0 = b * kScaleRows;
      for (int f = threadIdx.x; f < D * kScaleRows / 16; f += kWarps * 32) {  // 16 bytes a thread
        const int c = f / (kScaleRows / 16), q = f % (kScaleRows / 16);
        if (k0 + 16 * q < Np) *reinterpret_cast<uint4*>(out + size_t(c) * Np + k0 + 16 * q) = tile[c][q ^ ((c / E) % 8)];
      }
    }
  }
}

// The column sums of V's block b of head h (see the top): sums[(h·blocks + b)·D + c].
template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) v_column_sums(const T* V, int N, int blocks, float* sums) {
  constexpr int E = D / 32;
  const int b = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* x = V + size_t(h) * N * D;
  uint32_t raw[kRowsPerWarp][E / 2];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = b * kScaleRows + warp * kRowsPerWarp + r;
    load_part<E>(x + size_t(row < N ? row : 0) * D + lane * E, row < N, raw[r]);
  }
  float s[E] = {};
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    float f[E];
    unpack_part<T, E>(raw[r], f);
#pragma unroll
    for (int i = 0; i < E; ++i) s[i] += f[i];
  }
  __shared__ float part[kWarps][D];
#pragma unroll
  for (int i = 0; i < E; ++i) part[warp][lane * E + i] = s[i];
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += kWarps * 32) {
    float block = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) block += part[w][c];
    sums[(size_t(h) * blocks + b) * D + c] = block;
  }
}

// v̄ of one (head, column) a thread: the blocks' sums in order, over N.
__global__ void v_column_mean(const float* sums, int N, int blocks, int D, int count, float* mean) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // h·D + c
  if (i >= count) return;
  const int h = i / D, c = i % D;
  float total = 0.0f;
  for (int b = 0; b < blocks; ++b) total += sums[(size_t(h) * blocks + b) * D + c];
  mean[i] = total / float(N);
}

}  // namespace

void launch_quantize(const Shape& s, course::Dtype t, const std::vector<float>& signs, const void* Q, const void* K,
                     const void* V, const DeviceFp8& out) {
  const Scheme& scheme = out.scheme;
  require_supported(s);
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string("FP8 quantisation takes fp16 or bf16, not ") + course::name(t));
  course::require(s.d == 64 || s.d == 128, "stage 09 runs d = 64 or 128, not d = " + std::to_string(s.d));
  course::require(!scheme.incoherent || int(signs.size()) == s.d, "incoherent processing needs d signs");
  // A lane loads its part of a row as one word: 16 bytes for Q and K with the transform, else 8 (4 would do at
  // d = 64); the transform's Q and K bytes are stored 8 at a time.
  const auto aligned = [](const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; };
  const std::uintptr_t qk = scheme.incoherent ? 16 : 8;
  course::require(aligned(Q, qk) && aligned(K, qk) && aligned(V, 8),
                  "FP8 quantisation: Q and K must be " + std::to_string(qk) + "-byte aligned, V 8-byte aligned");
  course::require(aligned(out.Q, 8) && aligned(out.K, 8), "FP8 quantisation: its Q and K outputs must be 8-byte aligned");
  SignBits bits{};
  if (scheme.incoherent)
    for (int c = 0; c < s.d; ++c)
      if (signs[c] < 0) bits.bits[c / 32] |= 1u << (c % 32);
  const int blocks = (s.N + kScaleRows - 1) / kScaleRows;
  course::require(s.heads() <= 65535, "stage 09's quantisation: at most 65535 heads (B·H)");
  course::require(out.v_mean != nullptr && out.v_sums != nullptr, "FP8 quantisation: v_mean and v_sums are needed");
  const Tensors tensors{{Q, K, V}, {out.Q, out.K, out.Vt}, {out.q_scale, out.k_scale, out.v_scale}, out.amax, out.bad,
                        out.v_mean};
  const bool per_tensor = scheme.granularity == Granularity::tensor;
  const float inv_sqrt_d = 1.0f / std::sqrt(float(s.d));  // the CPU's transform_rows uses the same float
  const dim3 grid(unsigned(blocks), unsigned(s.heads()), 3);
  auto run = [&](auto kernel_of) {
    if (per_tensor) {
      CUDA_CHECK(cudaMemsetAsync(out.amax, 0, 3 * sizeof(float)));
      kernel_of(std::true_type{})<<<grid, kWarps * 32>>>(tensors, s.N, blocks, true, bits, inv_sqrt_d);
      CUDA_CHECK_LAUNCH();
    }
    kernel_of(std::false_type{})<<<grid, kWarps * 32>>>(tensors, s.N, blocks, per_tensor, bits, inv_sqrt_d);
    CUDA_CHECK_LAUNCH();
  };
  auto with = [&](auto type, auto d) {
    using T = decltype(type);
    constexpr int D = decltype(d)::value;
    const int count = s.heads() * D;
    if (scheme.centre_v) {
      v_column_sums<T, D><<<dim3(unsigned(blocks), unsigned(s.heads())), kWarps * 32>>>(static_cast<const T*>(V), s.N,
                                                                                          blocks, out.v_sums);
      CUDA_CHECK_LAUNCH();
      v_column_mean<<<(count + 255) / 256, 256>>>(out.v_sums, s.N, blocks, D, count, out.v_mean);
      CUDA_CHECK_LAUNCH();
    } else {
      CUDA_CHECK(cudaMemsetAsync(out.v_mean, 0, size_t(count) * sizeof(float)));
    }
    // The four kernels: with or without the transform, V centred or not (an amax-only form of each).
    if (scheme.incoherent && scheme.centre_v)
      run([](auto amax_only) { return fp8_quantize<T, D, true, decltype(amax_only)::value, true>; });
    else if (scheme.incoherent)
      run([](auto amax_only) { return fp8_quantize<T, D, true, decltype(amax_only)::value, false>; });
    else if (scheme.centre_v)
      run([](auto amax_only) { return fp8_quantize<T, D, false, decltype(amax_only)::value, true>; });
    else run([](auto amax_only) { return fp8_quantize<T, D, false, decltype(amax_only)::value, false>; });
  };
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) half ? with(__half{}, std::integral_constant<int, 64>{}) : with(__nv_bfloat16{}, std::integral_constant<int, 64>{});
  else half ? with(__half{}, std::integral_constant<int, 128>{}) : with(__nv_bfloat16{}, std::integral_constant<int, 128>{});
}

void check_quantized(const Shape& s, const DeviceFp8& q) {
  int bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, q.bad, sizeof bad, cudaMemcpyDeviceToHost));
  course::require(bad == 0, "FP8 quantisation: the input holds " + std::to_string(bad) +
                                " NaN or inf values; no scale can represent them");
  const int blocks = (s.N + kScaleRows - 1) / kScaleRows;
  std::vector<float> v(std::size_t(s.heads()) * blocks);
  CUDA_CHECK(cudaMemcpy(v.data(), q.v_scale, v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int h = 0; h < s.heads(); ++h) {
    const double span = v_scale_span(v.data() + std::size_t(h) * blocks, blocks);
    course::require(span <= kMaxVScaleSpan, "FP8 quantisation: V's per-block descales in head " + std::to_string(h) +
                                                " span 2^" + std::to_string(int(std::ceil(std::log2(span)))) +
                                                ", past the 2^64 the attention's steps between blocks allow in fp32; "
                                                "quantise V per tensor");
  }
}

}  // namespace attention::fp8
