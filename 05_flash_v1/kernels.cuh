// Stage 05's kernels (device pointers, the layout of algorithm.hpp). Defined only in a CUDA build.
#pragma once

#include <cstddef>

#include "algorithm.hpp"

namespace attention {

// Standard attention: S and P are materialised. `workspace` holds standard_workspace_floats(s).
std::size_t standard_workspace_floats(const Shape& s);
void launch_standard(const Shape& s, const float* Q, const float* K, const float* V, float* O,
                     float* workspace);

// FlashAttention-1 with blocks b; writes O, and the final l and m of every row.
// Throws UsageError if (d, Bc) is not one of the compiled block sizes (flash_v1_compiled) or needs
// more shared memory than the GPU has.
void launch_flash_v1(const Shape& s, Blocks b, const float* Q, const float* K, const float* V,
                     float* O, float* l, float* m);
// Shared memory a block of the FA-1 kernel uses for (d, Bc), in bytes (0 if not compiled).
std::size_t flash_v1_smem_bytes(int d, int Bc);
// Throws UsageError, naming the choices, unless the kernel is compiled for (d, Bc) and its shared
// memory fits this GPU.
void require_flash_v1_compiled(int d, int Bc);

}  // namespace attention
