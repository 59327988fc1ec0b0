// 08_race_demo: planted races for chapter 08's lesson on compute-sanitizer. Each case is one small
// kernel (one block) with one lesson; the program runs the case named on its command line, says what
// it did and what to expect, and prints what it saw. It exits 0 whatever it saw: wrong results are
// the point. scripts/device/stage08.sh (step `race`) runs every case plain and under racecheck,
// memcheck and synccheck.
//
//   08_race_demo --list          the cases
//   08_race_demo tma_nowait      one case
//   compute-sanitizer --tool racecheck --racecheck-report all build/bin/08_race_demo tma_nowait
//
// The question: racecheck reports 0 hazards on every rung of stage 08; does that cover the rungs'
// waits on the copy engine (TMA) and the tensor cores (wgmma)? Only if racecheck sees those units'
// shared-memory accesses. The cases: a plain race and its fix (smem_race, smem_ok), a 1-D bulk copy
// read too early and in time (bulk_nowait, bulk_wait), the same for a TMA tensor copy (tma_nowait,
// tma_wait), B overwritten before wgmma's wait and after it (wgmma_early, wgmma_ok). Chapter 08's
// Correctness has what each showed (racecheck catches the 1-D copy, not the tensor copy nor wgmma);
// the documentation read for it and the predictions are in the H100's lab record.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "device_buffer.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "options.hpp"

namespace attention::fa3::race {

constexpr int kThreads = 128;             // one warpgroup, one block
constexpr int kRows = 64, kCols = 64;     // a tile of 64 × 64 16-bit values: 8 KB
constexpr int kValues = kRows * kCols;
constexpr uint32_t kBytes = kValues * 2;
constexpr uint16_t kOld = 0xFFFF;         // what shared memory holds before the copy (never a value)
__host__ __device__ inline uint16_t value(int r, int c) { return uint16_t(r * kCols + c + 1); }  // the copy's

// The 1-D bulk copy (no tensor map): `bytes` from global memory to shared memory, landing on `bar`
// (PTX ISA, "cp.async.bulk"; the rungs use its tensor form, hopper::tma_load_3d). Here only.
__device__ inline void bulk_load(void* smem_dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   hopper::smem_u32(smem_dst)),
               "l"(src), "r"(bytes), "r"(hopper::smem_u32(bar))
               : "memory");
}

// Lesson 1: a plain race. Thread t writes s[t] and reads s[t + 32] (the next warp's), with a
// __syncthreads between (kSync) or without. Warps 1-3 write 20 us late, so that without the barrier
// warp 0 reads old values: racecheck should report the race whatever the timing.
template <bool kSync>
__global__ void __launch_bounds__(kThreads) neighbours(int* out) {
  __shared__ int s[kThreads];
  const int t = threadIdx.x;
  s[t] = 0;  // the old value
  __syncthreads();
  if (t >= 32) __nanosleep(20000);
  s[t] = t + 1;  // the new one
  if constexpr (kSync) __syncthreads();
  out[t] = s[(t + 32) % kThreads];
}

// Lessons 2 and 3: thread 0 asks for a 64 × 64 tile (the bulk copy, or TMA with the rungs' kind of
// tensor map and 128-byte swizzle); every thread then reads 32 of its values, after waiting on the
// mbarrier (kWait) or at once. out[t] = how many of them had not landed (still kOld); wrong[t] =
// how many were neither. Without the wait the block still waits before it ends: a block must not
// finish while a copy into its shared memory is in flight.
template <bool kTensor, bool kWait>
__global__ void __launch_bounds__(kThreads)
    copy_then_read(const __grid_constant__ CUtensorMap map, const uint16_t* src, int* out, int* wrong) {
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const tile = align1024(smem_raw);  // the swizzle's atom: TMA writes 1024-byte aligned tiles
  uint64_t* const bar = reinterpret_cast<uint64_t*>(tile + kValues);
  const int t = threadIdx.x;
  if (t == 0) {
    hopper::mbarrier_init(bar, 1);
    hopper::fence_barrier_init();
  }
  for (int e = t; e < kValues; e += kThreads) tile[e] = kOld;
  hopper::fence_proxy_async();  // these writes before the copy engine's
  __syncthreads();
  if (t == 0) {
    hopper::mbarrier_arrive_expect_tx(bar, kBytes);
    if constexpr (kTensor) hopper::tma_load_3d(tile, &map, bar, 0, 0, 0);
    else bulk_load(tile, src, kBytes, bar);
  }
  if constexpr (kWait) hopper::mbarrier_wait(bar, 0);
  int old = 0, bad = 0;
  const int r = t / 2;
  for (int k = 0; k < 32; ++k) {
    const int c = 32 * (t % 2) + k;
    // TMA wrote the 128-byte swizzle (chunk c / 8 of row r at chunk (c / 8) ^ (r % 8)); the bulk
    // copy wrote the bytes as they are.
    const uint16_t v = tile[kTensor ? hopper::swizzle128<kRows>(r, c / 8) + c % 8 : r * kCols + c];
    old += v == kOld;
    bad += v != kOld && v != value(r, c);
  }
  if constexpr (!kWait) hopper::mbarrier_wait(bar, 0);
  out[t] = old;
  wrong[t] = bad;
}

// Lesson 4: the tensor cores read shared memory after their instruction was issued. One warpgroup
// issues 32 wgmma's (D += A·Bᵀ, 64 × 64 × 16 each, A and B all ones: D = 32 · 16 = 512) and then
// writes twos over B, before wgmma_wait (kEarly) or after it. Products that read the new B make D
// larger than 512. out[i] = D's 4096 values.
template <bool kEarly>
__global__ void __launch_bounds__(kThreads) wgmma_then_overwrite(float* out) {
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const A = align1024(smem_raw);  // 64 × 64, K-major, swizzled as Q is in the rungs
  uint16_t* const B = A + kValues;          // 64 × 64, K-major, as K is
  const int t = threadIdx.x;
  constexpr uint16_t kOne = 0x3C00, kTwo = 0x4000;  // fp16 1 and 2 (every value equal: no swizzle to mind)
  for (int e = t; e < kValues; e += kThreads) A[e] = B[e] = kOne;
  hopper::fence_proxy_async();  // the threads' writes before the tensor cores' reads
  __syncthreads();

  float d[kCols / 8][4];
  const uint64_t a = hopper::make_desc(hopper::smem_u32(A), 0, 1024), b = hopper::make_desc(hopper::smem_u32(B), 0, 1024);
  hopper::wgmma_fence();
#pragma unroll
  for (int s = 0; s < 32; ++s)  // k steps 0-3 of the 64 columns, eight times over
    hopper::wgmma_ss<__half, kCols>(d, hopper::desc_advance(a, (s % 4) * 32), hopper::desc_advance(b, (s % 4) * 32), s > 0);
  hopper::wgmma_commit();
  if constexpr (kEarly)
    for (int e = t; e < kValues; e += kThreads) B[e] = kTwo;  // while the products may still read B
  hopper::wgmma_wait<0>();
  hopper::fence_registers(d);
  if constexpr (!kEarly)
    for (int e = t; e < kValues; e += kThreads) B[e] = kTwo;  // the products are done: harmless
#pragma unroll
  for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) out[(t * (kCols / 8) + n) * 4 + e] = d[n][e];
}

struct Case {
  const char* name;
  const char* does;    // what the kernel does
  const char* expect;  // what a learner should expect: plain, then under racecheck
};
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"smem_race", "thread t writes s[t], then reads s[t + 32] (the next warp's) with no barrier between",
       "plain: some reads see the old value (warp 0's 32 at least: warps 1-3 write 20 us late). racecheck: an "
       "ERROR, "
       "'Race reported between Write access ... and Read access ...' at the two lines of neighbours()"},
      {"smem_ok", "the same with __syncthreads() between the write and the read",
       "plain: no old values. racecheck: 0 hazards"},
      {"bulk_nowait", "thread 0 asks for a 64 x 64 tile by the 1-D bulk copy (cp.async.bulk); every thread reads it "
                      "at once, without waiting on the mbarrier",
       "plain: most values not landed yet (under a tool maybe none: it slows the reads). racecheck (2024.4 or "
       "newer models cp.async.bulk): ERROR hazards between the copy and the reads, whatever the timing"},
      {"bulk_wait", "the same, reading after mbarrier_wait",
       "plain: every value landed. racecheck: 0 hazards (before 2026.3 a false positive is possible: NVIDIA "
       "fixed some for mbarrier complete-tx then)"},
      {"tma_nowait", "thread 0 asks the copy engine for the tile through a tensor map (cp.async.bulk.tensor, as the "
                     "rungs do); every thread reads it at once, without waiting",
       "plain: most values not landed yet. racecheck: 0 hazards, a false negative: no release up to 2026.3 says "
       "racecheck models the tensor copy's writes"},
      {"tma_wait", "the same, reading after mbarrier_wait (what the rungs do)",
       "plain: every value landed. racecheck: 0 hazards"},
      {"wgmma_early", "one warpgroup issues 32 wgmma's reading A and B (all ones) from shared memory, then writes twos "
                      "over B before wgmma_wait",
       "plain: any number of D's values above 512 (products that read the new B), 0 included. racecheck: 0 "
       "hazards, a false negative: no release says racecheck tracks wgmma's operand reads"},
      {"wgmma_ok", "the same, writing over B after wgmma_wait", "plain: every value of D is 512. racecheck: 0 hazards"},
  };
  return all;
}

void run(const std::string& name) {
  if (name == "smem_race" || name == "smem_ok") {
    course::DeviceBuffer<int> out(kThreads);
    if (name == "smem_race") neighbours<false><<<1, kThreads>>>(out.get());
    else neighbours<true><<<1, kThreads>>>(out.get());
    CUDA_CHECK_LAUNCH();
    const std::vector<int> got = out.download();
    int old = 0, bad = 0;
    for (int t = 0; t < kThreads; ++t) {
      old += got[t] == 0;
      bad += got[t] != 0 && got[t] != (t + 32) % kThreads + 1;
    }
    std::printf("result: %d of %d reads saw the old value, %d neither the old nor the new\n", old, kThreads, bad);
    return;
  }
  if (name.rfind("wgmma", 0) == 0) {
    const size_t smem = 2 * kBytes + 1024;
    course::DeviceBuffer<float> out(kValues);
    const auto kernel = name == "wgmma_early" ? wgmma_then_overwrite<true> : wgmma_then_overwrite<false>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<1, kThreads, smem>>>(out.get());
    CUDA_CHECK_LAUNCH();
    int larger = 0, bad = 0;
    for (float v : out.download()) {
      larger += v > 512.0f && v <= 1024.0f;
      bad += v < 512.0f || v > 1024.0f;
    }
    std::printf("result: %d of %d values of D above 512 (products that read the new B), %d outside [512, 1024]\n",
                larger, kValues, bad);
    return;
  }
  const bool tensor = name.rfind("tma", 0) == 0, wait = name.find("_wait") != std::string::npos;
  std::vector<uint16_t> host(kValues);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) host[size_t(r) * kCols + c] = value(r, c);
  course::DeviceBuffer<uint16_t> src(host);
  course::DeviceBuffer<int> out(kThreads), wrong(kThreads);
  // The rungs' tensor map (fa3_host.cu): one head of 64 rows × d = 64, boxes of 64 rows, 128-byte swizzle.
  const CUtensorMap map = make_tensor_map(src.get(), false, 1, kRows, kCols, kRows);
  const size_t smem = kBytes + 1024 + 64;
  const auto kernel = tensor ? (wait ? copy_then_read<true, true> : copy_then_read<true, false>)
                             : (wait ? copy_then_read<false, true> : copy_then_read<false, false>);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<1, kThreads, smem>>>(map, src.get(), out.get(), wrong.get());
  CUDA_CHECK_LAUNCH();
  int old = 0, bad = 0;
  for (int x : out.download()) old += x;
  for (int x : wrong.download()) bad += x;
  std::printf("result: %d of %d values read before they landed, %d neither the old nor the copied value\n", old,
              kValues, bad);
}

}  // namespace attention::fa3::race

int main(int argc, char** argv) {
  using namespace attention::fa3::race;
  CLI::App app{"08_race_demo: planted races for compute-sanitizer (chapter 08); run one case, or --list"};
  std::string name;
  bool list = false;
  std::vector<std::string> names;
  for (const auto& c : cases()) names.push_back(c.name);
  app.add_option("case", name, "The case to run")->check(CLI::IsMember(names));
  app.add_flag("--list", list, "Print the cases' names, one a line");
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;
  if (list) {
    for (const auto& n : names) std::printf("%s\n", n.c_str());
    return 0;
  }
  return course::run_program("08_race_demo", [&]() -> int {
    course::require(!name.empty(), "name a case (08_race_demo --list shows them)");
    const Case& c = *std::find_if(cases().begin(), cases().end(), [&](const Case& x) { return name == x.name; });
    std::printf("case %s: %s\nexpect: %s\n", c.name, c.does, c.expect);
    const auto& g = course::gpu();
    if (!g.available || g.cc_major != 9 || g.cc_minor != 0) {
      std::printf("not run: %s\n", g.available ? ("the cases need a Hopper GPU (sm_90); this is " + g.name).c_str()
                                               : g.why_not.c_str());
      return 0;
    }
    run(name);
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;  // whatever the result: wrong results are the lesson
  });
}
