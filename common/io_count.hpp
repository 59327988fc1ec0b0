// The counting view of global memory ("HBM") that the CPU versions of the algorithms run through,
// so that the exact IO of an algorithm is known and testable without a GPU.
//
// The memory system does not move single floats: it moves 32-byte sectors. One request (one warp's
// load or store instruction, or one contiguous segment such as a row of a tile) costs every sector
// it touches, once. So the view counts sectors per request: the sectors the warps request
// (l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}), which, when nothing is cached on the SM, are
// the bytes that cross between the SMs and L2 (common/counters.hpp).
//
//   Hbm hbm;
//   auto A = hbm.wrap(a.data(), a.size());          // a float array in "global memory"
//   A.load(row * K, K, tile);                        // one request: a row of K floats
//   A.warp_load(index, 32, values);                  // one warp: lane l reads A[index[l]]
//   hbm.count().read_bytes                           // sectors touched x 32
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace course {

constexpr std::uint64_t kSectorBytes = 32;
constexpr int kWarpSize = 32;
constexpr int kMaxRequest = 4 * kWarpSize;  // a warp's 16-byte accesses: 128 floats

struct IoCount {
  std::uint64_t read_bytes = 0;
  std::uint64_t write_bytes = 0;
  std::uint64_t total() const { return read_bytes + write_bytes; }
  IoCount& operator+=(const IoCount& b) {  // the traffic of one pass after another
    read_bytes += b.read_bytes;
    write_bytes += b.write_bytes;
    return *this;
  }
};

template <class T>
class GlobalArray {
 public:
  using Value = std::remove_const_t<T>;

  GlobalArray(T* data, std::size_t count, std::uint64_t base, IoCount* io)
      : data_(data), count_(count), base_(base), io_(io) {}

  std::size_t size() const { return count_; }

  // One request for the contiguous elements [first, first + n).
  void load(std::size_t first, std::size_t n, Value* out) const {
    check(first, n);
    io_->read_bytes += segment_sectors(first, n) * kSectorBytes;
    std::copy(data_ + first, data_ + first + n, out);
  }
  void store(std::size_t first, std::size_t n, const T* in) const {
    check(first, n);
    io_->write_bytes += segment_sectors(first, n) * kSectorBytes;
    std::copy(in, in + n, data_ + first);
  }

  // One warp-wide request: lane l (l < lanes) reads element index[l]. Lanes that touch the same
  // sector share it, as the hardware's coalescer does. With 16-byte accesses a warp touches up to
  // 128 elements, so up to 4 x 32 indices are accepted.
  void warp_load(const std::size_t* index, int lanes, Value* out) const {
    io_->read_bytes += warp_sectors(index, lanes) * kSectorBytes;
    for (int l = 0; l < lanes; ++l) out[l] = data_[index[l]];
  }
  void warp_store(const std::size_t* index, int lanes, const T* in) const {
    io_->write_bytes += warp_sectors(index, lanes) * kSectorBytes;
    for (int l = 0; l < lanes; ++l) data_[index[l]] = in[l];
  }

 private:
  void check(std::size_t first, std::size_t n) const {
    if (n == 0 || first + n > count_ || first + n < first) {
      throw std::out_of_range("counting view: access [" + std::to_string(first) + ", " +
                              std::to_string(first + n) + ") outside an array of " +
                              std::to_string(count_));
    }
  }
  std::uint64_t sector_of(std::size_t i) const { return (base_ + i * sizeof(T)) / kSectorBytes; }
  std::uint64_t segment_sectors(std::size_t first, std::size_t n) const {
    const std::uint64_t last_byte = base_ + (first + n) * sizeof(T) - 1;
    return last_byte / kSectorBytes - sector_of(first) + 1;
  }
  std::uint64_t warp_sectors(const std::size_t* index, int lanes) const {
    if (lanes <= 0 || lanes > kMaxRequest) throw std::out_of_range("counting view: 1..128 indices");
    std::array<std::uint64_t, kMaxRequest> sectors{};
    for (int l = 0; l < lanes; ++l) {
      check(index[l], 1);
      sectors[l] = sector_of(index[l]);
    }
    std::sort(sectors.begin(), sectors.begin() + lanes);
    return static_cast<std::uint64_t>(std::unique(sectors.begin(), sectors.begin() + lanes) -
                                      sectors.begin());
  }

  T* data_;
  std::size_t count_;
  std::uint64_t base_;
  IoCount* io_;
};

class Hbm {
 public:
  // Places `data` in simulated global memory, aligned to 256 bytes as cudaMalloc aligns.
  template <class T>
  GlobalArray<T> wrap(T* data, std::size_t count) {
    static_assert(sizeof(T) <= kSectorBytes && kSectorBytes % sizeof(T) == 0,
                  "elements must not straddle sectors");
    const std::uint64_t base = next_base_;
    next_base_ += (count * sizeof(T) + 255) / 256 * 256 + 256;
    return GlobalArray<T>(data, count, base, &count_);
  }
  const IoCount& count() const { return count_; }

 private:
  std::uint64_t next_base_ = 0;
  IoCount count_;
};

}  // namespace course
