// RAII device memory. Every allocation is tracked, so a program can report the peak device memory
// its buffers held (the peak_mem_bytes column).
#pragma once
#if COURSE_HAS_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include "check.hpp"

namespace course {

// Bytes held by DeviceBuffers now, and the most held since the last reset.
std::size_t device_bytes_in_use();
std::size_t device_bytes_peak();
void reset_device_peak();
// Allocates, or throws ResourceError saying how much was asked for and how much is free.
void* device_allocate(std::size_t bytes);
void device_free(void* pointer, std::size_t bytes) noexcept;

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count)
      : data_(static_cast<T*>(device_allocate(count * sizeof(T)))), count_(count) {}
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { device_free(data_, bytes()); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }

  T* get() { return data_; }
  const T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw std::logic_error("DeviceBuffer::upload: size mismatch");
    CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Elements [first, first + count) only.
  std::vector<T> download(std::size_t first, std::size_t count) const {
    if (first > count_ || count > count_ - first) throw std::logic_error("DeviceBuffer::download: range out of bounds");
    std::vector<T> host(count);
    CUDA_CHECK(cudaMemcpy(host.data(), data_ + first, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with 0xFF (a NaN for float and double), so an element a kernel forgot to
  // write fails the comparison with the reference.
  void poison() { CUDA_CHECK(cudaMemset(data_, 0xFF, bytes())); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace course

#endif  // COURSE_HAS_CUDA
