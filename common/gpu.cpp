#include "gpu.hpp"

#if COURSE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "check.hpp"
#endif

namespace course {

#if COURSE_HAS_CUDA
namespace {
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
}  // namespace

std::string why_no_gpu(int status, int device_count, int driver_version, int runtime_version) {
  const auto error = static_cast<cudaError_t>(status);
  // The runtime says "insufficient driver" also when there is no driver at all (a machine without
  // an NVIDIA GPU): that must not send a learner off to update a driver.
  if ((error == cudaErrorInsufficientDriver && driver_version == 0) || error == cudaErrorNoDevice ||
      (error == cudaSuccess && device_count == 0)) {
    return "no NVIDIA GPU or driver found";
  }
  if (error == cudaErrorInsufficientDriver) {
    return "the NVIDIA driver supports CUDA up to " + cuda_version(driver_version) +
           ", older than the CUDA " + cuda_version(runtime_version) +
           " this was built with: update the driver, or build with an older CUDA Toolkit";
  }
  return std::string("no usable CUDA device (") + cudaGetErrorName(error) + ": " + cudaGetErrorString(error) + ")";
}
#endif

namespace {
GpuInfo query() {
  GpuInfo info;
#if COURSE_HAS_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);  // 0 when no driver is installed
    cudaRuntimeGetVersion(&runtime);
    info.why_not = why_no_gpu(status, count, driver, runtime);
    cudaGetLastError();
    return info;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  CUDA_CHECK(cudaSetDevice(0));
  info.available = true;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  info.global_bytes = prop.totalGlobalMem;
  info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
#else
  info.why_not = "built without CUDA (no CUDA compiler was found when the build was configured)";
#endif
  return info;
}
}  // namespace

const GpuInfo& gpu() {
  static const GpuInfo info = query();
  return info;
}

std::string device_label() { return gpu().available ? gpu().name : std::string("cpu"); }

std::string why_not_hopper(bool built, const std::string& what) {
  if (!built) return "this build has no sm_90a kernels (they need nvcc 12 or newer)";
  const GpuInfo& g = gpu();
  if (!g.available) return g.why_not;
  if (g.cc_major != 9 || g.cc_minor != 0)
    return what + " need a Hopper GPU (sm_90: H100, H200, GH200); this is " + g.name + " (sm_" +
           std::to_string(g.cc_major) + std::to_string(g.cc_minor) + ")";
  return "";
}

}  // namespace course

#include <fstream>
#include <sstream>

#include "check.hpp"

namespace course {

namespace {
// MemAvailable from /proc/meminfo, or 0 if unknown.
double host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0.0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return 0.0;
}
}  // namespace

#if COURSE_HAS_CUDA
void require_shared_memory(std::size_t bytes, const std::string& what) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  require(bytes <= std::size_t(limit), what + " needs " + std::to_string(bytes) +
                                           " bytes of shared memory a block; this GPU offers " +
                                           std::to_string(limit) + " (README: Hardware and requirements)");
}
#endif

void require_fits(double host_bytes, double device_bytes, const std::string& what) {
  const double host = host_available_bytes();
  if (host > 0.0 && host_bytes > 0.9 * host) {
    throw ResourceError(what + " needs " + human_bytes(host_bytes) + " of host memory; " +
                        human_bytes(host) + " is available. Choose a smaller size.");
  }
#if COURSE_HAS_CUDA
  if (device_bytes > 0.0 && gpu().available) {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (device_bytes > static_cast<double>(free_bytes)) {
      throw ResourceError(what + " needs " + human_bytes(device_bytes) + " of GPU memory; " +
                          human_bytes(static_cast<double>(free_bytes)) + " of " +
                          human_bytes(static_cast<double>(total_bytes)) +
                          " is free. Choose a smaller size.");
    }
  }
#else
  (void)device_bytes;
#endif
}

}  // namespace course
