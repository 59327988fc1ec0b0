// COURSE_HD marks small functions that run on both the CPU and the GPU (host and device), such as
// the combine operators a CPU algorithm shares with its kernel.
#pragma once
#ifdef __CUDACC__
#define COURSE_HD __host__ __device__
#else
#define COURSE_HD
#endif
