// Which GPU (if any) this process can use, asked once.
#pragma once

#include <cstddef>
#include <string>

namespace course {

struct GpuInfo {
  bool available = false;
  std::string why_not;  // when !available: why, in words a learner can act on
  std::string name;     // e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t global_bytes = 0;
  std::size_t smem_per_block_optin = 0;
};

// Device 0, queried on first use.
const GpuInfo& gpu();

// The value of the CSV `device` column: the GPU's name, or "cpu".
std::string device_label();

// Why `what` (kernels built for sm_90a alone when `built`) cannot run here, or "" when it can: no
// sm_90a kernels in this build, no usable GPU (GpuInfo::why_not), or a GPU that is not a Hopper.
std::string why_not_hopper(bool built, const std::string& what);

#if COURSE_HAS_CUDA
// GpuInfo::why_not when cudaGetDeviceCount fails or finds no device: `status` is its cudaError_t,
// the versions are those of cudaDriverGetVersion (0: no driver) and cudaRuntimeGetVersion. No GPU
// or no driver: "no NVIDIA GPU or driver found"; a driver older than the runtime: says so, with
// both versions.
std::string why_no_gpu(int status, int device_count, int driver_version, int runtime_version);
#endif

}  // namespace course

namespace course {
#if COURSE_HAS_CUDA
// Throws UsageError unless one block of `what` may have `bytes` of shared memory on the current GPU
// (its opt-in limit: 227 KB on an H100, 163 KB on an A100, 99 KB on most consumer GPUs), naming
// both numbers. Call before cudaFuncSetAttribute(..., MaxDynamicSharedMemorySize, bytes), whose
// own error ("invalid argument") would not say what is missing.
void require_shared_memory(std::size_t bytes, const std::string& what);
#endif

// Throws ResourceError, with the sizes, unless `host_bytes` fit in the host's available memory and
// `device_bytes` (when a GPU is used) in the GPU's free memory. Call before allocating a problem.
void require_fits(double host_bytes, double device_bytes, const std::string& what);
}  // namespace course
