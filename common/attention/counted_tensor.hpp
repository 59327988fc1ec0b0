// A tensor of fp32, fp16 or bf16 values in the counting view of global memory (io_count.hpp), as
// the CPU versions of stages 06 and 07 (and the stages after them) read and write it: the values
// stored in the dtype (floats, or the 16-bit values' bits), each request counted in sectors of the
// stored bytes, the values handed to the algorithm as floats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtype.hpp"
#include "io_count.hpp"

namespace attention {

// Sectors touched by the 4-byte values [first, first + n) of an array starting on a sector.
inline double float_sectors(std::size_t first, std::size_t n) {
  return n == 0 ? 0.0 : double((first + n - 1) / 8 - first / 8 + 1);
}

// The storage of one tensor as the counting view sees it: floats, or the 16-bit values' bits.
struct Stored {
  course::Dtype dtype;
  std::vector<float> f;
  std::vector<std::uint16_t> h;
  Stored(course::Dtype t, const float* values, std::size_t n) : dtype(t) {
    if (t == course::Dtype::fp32) {
      f.assign(values, values + n);
    } else {
      h.resize(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = course::float_to_bits(t, values[i]);
    }
  }
  // The stored values as floats, into out[0 .. n).
  void copy_to(float* out) const {
    if (dtype == course::Dtype::fp32) {
      for (std::size_t i = 0; i < f.size(); ++i) out[i] = f[i];
    } else {
      for (std::size_t i = 0; i < h.size(); ++i) out[i] = course::bits_to_float(dtype, h[i]);
    }
  }
};

// A row (or rows) of `dtype` values through the counting view, converted to floats.
class Tensor {
 public:
  Tensor(course::Hbm& hbm, Stored& data)
      : data_(data),
        f_(hbm.wrap(data.f.data(), data.f.size())),
        h_(hbm.wrap(data.h.data(), data.h.size())) {}
  void load(std::size_t first, std::size_t n, float* out) {
    if (data_.dtype == course::Dtype::fp32) return f_.load(first, n, out);
    buffer_.resize(n);
    h_.load(first, n, buffer_.data());
    for (std::size_t k = 0; k < n; ++k) out[k] = course::bits_to_float(data_.dtype, buffer_[k]);
  }
  void store(std::size_t first, std::size_t n, const float* in) {
    if (data_.dtype == course::Dtype::fp32) return f_.store(first, n, in);
    buffer_.resize(n);
    for (std::size_t k = 0; k < n; ++k) buffer_[k] = course::float_to_bits(data_.dtype, in[k]);
    h_.store(first, n, buffer_.data());
  }

 private:
  Stored& data_;
  course::GlobalArray<float> f_;
  course::GlobalArray<std::uint16_t> h_;
  std::vector<std::uint16_t> buffer_;
};

}  // namespace attention
