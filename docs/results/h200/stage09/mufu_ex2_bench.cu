// How many exponentials a clock does an SM do with ex2.approx.f32, .f16x2 and .bf16x2? (p89 micro-benchmark)
#include <cstdio>
#include <cstdint>
#include <cuda_fp16.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
constexpr int kChains = 8, kIters = 2048;
template <int kind>
__global__ void bench(uint32_t* out, long long* cycles, float seed) {
  uint32_t x[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) { float f = seed * (threadIdx.x + c); x[c] = __float_as_uint(f); if (kind) { __half2 h = __floats2half2_rn(-f, -f * 0.5f); x[c] = *reinterpret_cast<uint32_t*>(&h); } }
  __syncthreads();
  long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (kind == 0) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+r"(x[c]));
      if (kind == 1) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(x[c]));
      if (kind == 2) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(x[c]));
      if (kind == 3) asm volatile("{.reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %0, %0; mov.b32 %0, {t, t};}" : "+r"(x[c]));
      if (kind == 4) asm volatile("cvt.rn.f16x2.f32 %0, %0, %0;" : "+r"(x[c]));
      if (kind == 5) asm volatile("{.reg .b16 t; cvt.rn.satfinite.e4m3x2.f16x2 t, %0; mov.b32 %0, {t, t};}" : "+r"(x[c]));
      if (kind == 6) asm volatile("fma.rn.ftz.f32 %0, %0, %0, %0;" : "+r"(x[c]));
    }
  }
  __syncthreads();
  long long t1 = clock64();
  uint32_t s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s ^= x[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
int main() {
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int threads = 1024;
  uint32_t* out; long long* cyc;
  CK(cudaMalloc(&out, sizeof(uint32_t) * sms * threads)); CK(cudaMalloc(&cyc, sizeof(long long) * sms));
  long long h[1024];
  const char* names[7] = {"ex2.approx.ftz.f32", "ex2.approx.f16x2", "ex2.approx.ftz.bf16x2", "cvt e4m3x2.f32 (+mov)", "cvt f16x2.f32", "cvt e4m3x2.f16x2 (+mov)", "fma.f32"};
  for (int rep = 0; rep < 2; ++rep)
  for (int kind = 0; kind < 7; ++kind) {
    if (kind == 0) bench<0><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 1) bench<1><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 2) bench<2><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 3) bench<3><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 4) bench<4><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 5) bench<5><<<sms, threads>>>(out, cyc, 1e-3f);
    if (kind == 6) bench<6><<<sms, threads>>>(out, cyc, 1e-3f);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, cyc, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    double mean = 0; for (int b = 0; b < sms; ++b) mean += h[b]; mean /= sms;
    const double instr = double(threads) * kIters * kChains;  // per SM (one block an SM)
    const double exps = instr * (kind == 1 || kind == 2 ? 2 : 1);
    printf("%-24s instructions/clk/SM %.2f  values/clk/SM %.2f  (cycles %.0f)\n", names[kind], instr / mean, exps / mean, mean);
  }
  return 0;
}
