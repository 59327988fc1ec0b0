// 05_flash_v1: standard attention (S and P in global memory, built from stages 02 and 03) against
// FlashAttention-1 (Algorithm 1: K/V blocks outside, Q blocks inside), with their IO three ways and
// their peak device memory. docs/05_flash_v1.md explains.
#include "algorithm.hpp"
#include "check.hpp"
#include "flash_bench.hpp"
#include "kernels.cuh"

int main(int argc, char** argv) {
  using namespace attention;
  Program program;
  program.stage = "05_flash_v1";
  program.description =
      "05_flash_v1: standard attention against FlashAttention-1, IO measured three ways";
  Variant standard;
  standard.name = "standard";
  standard.model = [](const Shape& s, Blocks) { return standard_model_bytes(s); };
  standard.counted = [](const Shape& s, Blocks, const float* Q, const float* K, const float* V,
                        float* O) { return standard_counted(s, Q, K, V, O); };
#if COURSE_HAS_CUDA
  standard.workspace_floats = standard_workspace_floats;
  standard.gpu = [](const Shape& s, Blocks, const float* Q, const float* K, const float* V, float* O,
                    float* workspace) { launch_standard(s, Q, K, V, O, workspace); };
#endif
  Variant flash;
  flash.name = "flash_v1";
  flash.tiled = true;
  flash.model = flash_v1_model_bytes;
  flash.counted = [](const Shape& s, Blocks b, const float* Q, const float* K, const float* V,
                     float* O) {
    std::vector<float> l(std::size_t(s.heads()) * s.N), m(l.size());
    return flash_v1_counted(s, b, Q, K, V, O, l.data(), m.data());
  };
#if COURSE_HAS_CUDA
  flash.workspace_floats = [](const Shape& s) { return 2 * std::size_t(s.heads()) * s.N; };
  flash.gpu = [](const Shape& s, Blocks b, const float* Q, const float* K, const float* V, float* O,
                 float* workspace) {
    float* l = workspace;
    launch_flash_v1(s, b, Q, K, V, O, l, l + std::size_t(s.heads()) * s.N);
  };
#endif
  program.variants = {standard, flash};
  program.default_sram = [](int d) {
    return std::vector<long long>{sram_floats(flash_v1_compiled(d).back(), d)};
  };
  program.check_sram = [](long long M, int d, bool on_gpu) {
    const Blocks b = flash_v1_blocks(M, d);  // M below 4d: an error
#if COURSE_HAS_CUDA
    if (on_gpu) require_flash_v1_compiled(d, b.Bc);
#else
    (void)b, (void)on_gpu;
#endif
  };
  return run(argc, argv, program);
}
