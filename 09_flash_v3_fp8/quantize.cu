// The quantisation kernels: fp16 or bf16 Q, K, V to e4m3 and their descales, the same bytes as the
// CPU's quantize (fp8.cpp) computes, and V written transposed for the kernel's P·V.
//
// The unit of work is a scale block (128 rows of one head) of one tensor (Q, K or V). A persistent
// thread block takes one after another (fp8_quantize, below), its rows brought by the copy engine
// into shared memory a few blocks ahead; each of its 8 warps takes 16 rows, a row across the warp's
// 32 lanes (d/32 values a lane) or, for Q and K with the transform, across 4 (fwht_quad).
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

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
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

// max(a, |b|), NaN if either is (PTX max.NaN): a block's amax is then finite exactly when its values are, and
// checking it stands for checking every value.
__device__ inline float max_abs_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(b)));
  return r;
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
      x(k) = fmaf(x(k), (p & q) == 0 ? 1.0f : -1.0f, partner);  // x + partner or partner − x: one FFMA, exact as either
    }
#pragma unroll
  for (int bit = 8; bit < kVals; bit *= 2) inside(bit);  // strides 32 (and 64 at d = 128): between chunks
}

// A persistent block (a few an SM, the grid at most what fits at once) takes the scale blocks items
// blockIdx.x, blockIdx.x + gridDim.x, ...: item (z·heads + h)·blocks + b is block b of head h of tensor z.
// Its inputs (128 rows × D values, contiguous: 32 KB at d = 128) come by the copy engine (bulk_load) into
// a ring of kStages tiles in shared memory, kStages items ahead: the loads are in flight while the
// warps transform, reduce and store, and no warp's loads wait for its arithmetic. A tile is free again
// after the block's amax barrier, which every thread passes only after its reads of it.
// 3 tiles a block, 2 blocks an SM (112 KB of shared memory each at d = 128): on an H200 every scheme at
// d = 128 moves its minimum bytes at 87-98 % of a copy's rate; at d = 64 the transform's arithmetic
// still shows (79-84 %; the lab record).
constexpr int kStages = 3;
template <int D>
constexpr int kTileBytes = kScaleRows * D * 2;  // one item's 16-bit inputs
template <int D>
constexpr int kRingBytes = kStages * kTileBytes<D>;

template <class T, int D, bool kIncoherent, bool kAmaxOnly, bool kCentreV>
__global__ void __launch_bounds__(kWarps * 32, 2)
    fp8_quantize(Tensors t, int N, int heads, int blocks, bool per_tensor, SignBits signs, float inv_sqrt_d) {
  constexpr int E = D / 32;
  extern __shared__ __align__(128) uint8_t ring[];  // kStages tiles of kScaleRows rows × D inputs
  __shared__ uint64_t full[kStages];                 // tile s has landed
  __shared__ float warp_amax[2][kWarps];             // two items' worth: a fast warp may write the next one's
  // V only: Vᵀ's D rows of 128 positions, as 8 chunks of 16 bytes a row; chunk q of row c is stored at
  // q ^ ((c / E) % 8), so that the 8 lanes of a store's phase (rows c = lane·E + i) and the 8 threads of a
  // load's phase (one row's 8 chunks) each meet 8 different chunks: all 32 banks, no conflict.
  __shared__ uint4 tile[D][kScaleRows / 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, items = 3 * heads * blocks;
  const int g = lane / 4, p = lane % 4;  // the quads: a pass's row, the lane within it
  // The CTA's it-th item: its tensor, head and block.
  auto item_of = [&](int it, int& z, int& h, int& b) {
    const int item = blockIdx.x + it * gridDim.x;
    b = item % blocks, h = item / blocks % heads, z = item / blocks / heads;
    return item < items;
  };
  // (Chosen by ?: rather than indexed by z, which would copy the arrays to local memory.)
  auto pick = [](int z, auto a, auto b, auto c) { return z == 0 ? a : z == 1 ? b : c; };
  auto issue = [&](int it) {  // thread 0: the it-th item's rows into tile it % kStages
    int z, h, b;
    if (!item_of(it, z, h, b)) return;
    const int rows = min(kScaleRows, N - b * kScaleRows);
    const T* src = static_cast<const T*>(pick(z, t.in[0], t.in[1], t.in[2])) + (size_t(h) * N + size_t(b) * kScaleRows) * D;
    const unsigned bytes = unsigned(rows) * D * sizeof(T);
    hopper::mbarrier_arrive_expect_tx(&full[it % kStages], bytes);
    hopper::bulk_load(ring + (it % kStages) * kTileBytes<D>, src, bytes, &full[it % kStages]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) hopper::mbarrier_init(&full[s], 1);
    hopper::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int it = 0; it < kStages; ++it) issue(it);
  constexpr int kPasses = kRowsPerWarp / 8, kQuadVals = D / 4;  // the quads: 2 passes of 8 rows, D/4 values a lane
  // The transform's signs in the lane's words: value k of a pass (element 32·(k/8) + 8p + k%8) is the low half
  // of word k/2 if k is even, else its high half; word w's two signs sit at bits 15 − w and 31 − w, so
  // (flips << w) & 0x80008000 is the word's XOR mask.
  uint32_t flips = 0;
  if constexpr (kIncoherent)
    for (int k = 0; k < kQuadVals; ++k)
      flips |= ((signs.bits[k / 8] >> (8 * p + k % 8)) & 1u) << (k % 2 == 0 ? 15 - k / 2 : 31 - k / 2);
  int z, h, b;
  for (int it = 0; item_of(it, z, h, b); ++it) {
    const T* x = reinterpret_cast<const T*>(ring + (it % kStages) * kTileBytes<D>);  // the item's rows, from row b·128
    const bool transform = kIncoherent && z < 2;  // Q and K; V as it is, less v̄
    float mu[E];  // kCentreV: V's column means, subtracted (the other tensors, or without centring: none)
#pragma unroll
    for (int i = 0; i < E; ++i) mu[i] = kCentreV && z == 2 ? t.v_mean[size_t(h) * D + lane * E + i] : 0.0f;
    // The warp's 16 rows, in the rows' layout (v[r][i]: element lane·E + i of row r) or, with the
    // transform, in the quads' (value k of pass π is v's (π·E·8 + k)-th float): the same registers.
    float v[kRowsPerWarp][E];
    auto v_at = [&](int f) -> float& { return v[f / E][f % E]; };
    float amax = 0.0f;  // NaN if any value is (max_abs_nan)
    hopper::mbarrier_wait(&full[it % kStages], (it / kStages) & 1);
    if (transform) {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int r = warp * kRowsPerWarp + pass * 8 + g;  // the row within the block
        const bool valid = b * kScaleRows + r < N;
        auto at = [&](int k) -> float& { return v_at(pass * kQuadVals + k); };
#pragma unroll
        for (int j = 0; j < E; ++j) {
          const uint4 u = valid ? *reinterpret_cast<const uint4*>(x + r * D + (j * 4 + p) * 8) : make_uint4(0u, 0u, 0u, 0u);
          const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {  // times the signs (a 16-bit value's sign is its top bit), as floats
            const int word = 4 * j + q;
            const float2 f = to_float2(w[q] ^ ((flips << word) & 0x80008000u), T{});
            at(8 * j + 2 * q) = f.x, at(8 * j + 2 * q + 1) = f.y;
          }
        }
        fwht_quad<D>(at, p);
#pragma unroll
        for (int k = 0; k < kQuadVals; ++k) {
          at(k) *= inv_sqrt_d;
          amax = max_abs_nan(amax, at(k));
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int lr = warp * kRowsPerWarp + r;
        const bool valid = b * kScaleRows + lr < N;
        uint32_t raw[E / 2];
        load_part<E>(x + lr * D + lane * E, valid, raw);
        unpack_part<T, E>(raw, v[r]);
        if (kCentreV && z == 2 && valid)  // (padding rows stay 0: no key)
#pragma unroll
          for (int i = 0; i < E; ++i) v[r][i] -= mu[i];
#pragma unroll
        for (int i = 0; i < E; ++i) amax = max_abs_nan(amax, v[r][i]);
      }
    }
    // The block's amax: the warp's, then the 8 warps' in shared memory. After this barrier every thread
    // has read the tile: thread 0 refills it, kStages items ahead (the fence orders the reads before the
    // copy engine's writes).
#pragma unroll
    for (int m = 16; m > 0; m /= 2) amax = max_abs_nan(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    if (lane == 0) warp_amax[it % 2][warp] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
      hopper::fence_proxy_async();
      issue(it + kStages);
    }
    amax = warp_amax[it % 2][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) amax = max_abs_nan(amax, warp_amax[it % 2][w]);
    if constexpr (kAmaxOnly) {
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(t.amax) + z, __float_as_int(amax));
      continue;
    } else {
      if (threadIdx.x == 0 && !(amax <= FLT_MAX)) atomicAdd(t.bad, 1);  // a NaN or inf among the block's values
      if (per_tensor) amax = t.amax[z];
      amax = scale_amax(amax);
      const float inv = amax > 0.0f ? kE4m3Max / amax : 1.0f;  // as quantize() on the CPU
      if (threadIdx.x == 0)
        pick(z, t.scale[0], t.scale[1], t.scale[2])[size_t(h) * blocks + b] = amax > 0.0f ? amax / kE4m3Max : 1.0f;
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
        // (The previous item's reads of the tile are behind this item's amax barrier.)
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

// Blocks an SM of `kernel` with `smem` bytes of dynamic shared memory, asked once a kernel and device: the
// attribute and the occupancy query take microseconds of host time, which would otherwise sit inside a
// timed call, between its memsets and its kernels.
template <class Kernel>
int resident_blocks(Kernel kernel, int smem) {
  static std::mutex lock;
  static std::map<std::pair<std::uintptr_t, int>, int> known;  // (kernel, device) -> blocks an SM
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> hold(lock);
  const auto key = std::make_pair(reinterpret_cast<std::uintptr_t>(kernel), device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
  course::require(per_sm > 0, "stage 09's quantisation: its block does not fit on this GPU");
  known.emplace(key, per_sm);
  return per_sm;
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
  // The copy engine takes each block's rows whole: 16-byte aligned sources (the rows of a block are
  // 128 · d · 2 bytes, a multiple of 16). The transform's Q and K bytes are stored 8 at a time.
  const auto aligned = [](const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; };
  course::require(aligned(Q, 16) && aligned(K, 16) && aligned(V, 16), "FP8 quantisation: Q, K and V must be 16-byte aligned");
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
  const long long items = 3LL * s.heads() * blocks;
  // (A block's item index runs up to items plus a few grids: far from int's limit.)
  course::require(items <= 0x3fffffff, "stage 09's quantisation: at most 2^30 scale blocks (3 * B*H * N/128)");
  // The persistent kernels' grid: as many blocks as fit on the GPU at once, at most one an item.
  auto run = [&](auto kernel_of, int smem) {
    const auto launch = [&](auto kernel, bool per) {
      const int grid = int(std::min<long long>(items, 1LL * resident_blocks(kernel, smem) * course::gpu().sm_count));
      kernel<<<grid, kWarps * 32, smem>>>(tensors, s.N, s.heads(), blocks, per, bits, inv_sqrt_d);
      CUDA_CHECK_LAUNCH();
    };
    CUDA_CHECK(cudaMemsetAsync(out.bad, 0, sizeof(int)));
    if (per_tensor) {
      CUDA_CHECK(cudaMemsetAsync(out.amax, 0, 3 * sizeof(float)));
      launch(kernel_of(std::true_type{}), true);
    }
    launch(kernel_of(std::false_type{}), per_tensor);
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
      run([](auto amax_only) { return fp8_quantize<T, D, true, decltype(amax_only)::value, true>; }, kRingBytes<D>);
    else if (scheme.incoherent)
      run([](auto amax_only) { return fp8_quantize<T, D, true, decltype(amax_only)::value, false>; }, kRingBytes<D>);
    else if (scheme.centre_v)
      run([](auto amax_only) { return fp8_quantize<T, D, false, decltype(amax_only)::value, true>; }, kRingBytes<D>);
    else run([](auto amax_only) { return fp8_quantize<T, D, false, decltype(amax_only)::value, false>; }, kRingBytes<D>);
  };
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) half ? with(__half{}, std::integral_constant<int, 64>{}) : with(__nv_bfloat16{}, std::integral_constant<int, 64>{});
  else half ? with(__half{}, std::integral_constant<int, 128>{}) : with(__nv_bfloat16{}, std::integral_constant<int, 128>{});
}

void check_quantized(const Shape& s, const DeviceFp8& q) {
  int bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, q.bad, sizeof bad, cudaMemcpyDeviceToHost));
  course::require(bad == 0, "FP8 quantisation: " + std::to_string(bad) +
                                " blocks of 128 rows hold NaN or inf (after the transform, where there is one); no scale can "
                                "represent them");
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
