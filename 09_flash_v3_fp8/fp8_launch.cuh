// The host side every rung's launcher shares: the checks, the tensor maps of the e4m3 tiles, the
// descales, the persistent grid, and the launch itself (fp8_launch.cu).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../08_flash_v3/fa3_common.cuh"  // tc::Params
#include "check.hpp"
#include "fp8_pipeline.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention::fp8 {

// What a rung's kernel is launched with: the tensor maps of Q (boxes of q_box rows), K (Bc rows), Vᵀ
// and O, the parameters, the descales, the grid and its tile counter, and the heads.
struct Launch {
  CUtensorMap Q, K, Vt, O;
  tc::Params p;
  Scales sc;
  unsigned grid;
  int* next_tile;
  int heads;
};
// The problem any rung takes: a supported shape, O in fp16 or bf16, d = 64 or 128 (first, before a
// launcher picks a kernel by d).
void require_problem(const Shape& s, course::Dtype out);
// The checks every rung makes, then its maps and grid. Br: the rung's query rows a tile; Bc: its
// keys a block (256: the wide rungs, which take V per tensor and centred: checked here).
Launch prepare(const char* rung, const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
               const LaunchOptions& options, int Br, int Bc, int q_box);

// `kernel` on the launch's grid, `threads` a block, `bytes` of dynamic shared memory (checked against
// what the GPU offers a block first); `extra`: the kernel's arguments after the tile counter.
template <class Kernel, class... Extra>
void run(Kernel kernel, size_t bytes, int threads, const std::string& what, const Launch& l, Extra... extra) {
  course::require_shared_memory(bytes, what);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<l.grid, threads, bytes>>>(l.Q, l.K, l.Vt, l.O, l.p, l.sc, l.heads, l.next_tile, extra...);
  CUDA_CHECK_LAUNCH();
}

// f(T{}) for O's type: __half or __nv_bfloat16 (prepare checked it is one of them).
template <class F>
void with_type(course::Dtype out, F f) {
  if (out == course::Dtype::fp16) f(__half{});
  else f(__nv_bfloat16{});
}

}  // namespace attention::fp8
