// dst = src: the simplest memory-bound kernel. It reads every byte once and writes every byte once,
// so it is the check of the measured IO (DRAM and L2 traffic must each be the buffer's size) and
// the yardstick for memory-bound stages (its GB/s, counting bytes read plus written).
#pragma once
#if COURSE_HAS_CUDA

#include <cstddef>

namespace course {
void launch_copy(const float* src, float* dst, std::size_t n);
}  // namespace course

#endif
