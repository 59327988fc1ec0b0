#include "device_buffer.hpp"

#include <algorithm>
#include <atomic>
#include <sstream>

namespace course {

namespace {
std::atomic<std::size_t> g_in_use{0};
std::atomic<std::size_t> g_peak{0};
}  // namespace

std::size_t device_bytes_in_use() { return g_in_use.load(); }
std::size_t device_bytes_peak() { return g_peak.load(); }
void reset_device_peak() { g_peak.store(g_in_use.load()); }

void* device_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    std::ostringstream message;
    message << "cannot allocate " << human_bytes(static_cast<double>(bytes))
            << " on the GPU (" << cudaGetErrorName(status) << "): "
            << human_bytes(static_cast<double>(free_bytes)) << " free of "
            << human_bytes(static_cast<double>(total_bytes))
            << ". The problem does not fit in GPU memory; choose a smaller size.";
    if (status == cudaErrorMemoryAllocation) throw ResourceError(message.str());
    throw std::runtime_error(message.str());
  }
  const std::size_t now = g_in_use += bytes;
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return pointer;
}

void device_free(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  cudaFree(pointer);  // a failure here can only be reported by an earlier or later call
  g_in_use -= bytes;
}

}  // namespace course
