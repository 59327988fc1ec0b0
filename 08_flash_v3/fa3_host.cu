// The host side of stage 08: the tensor maps the TMA rungs copy through, and the check that the GPU
// is a Hopper.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention::fa3 {

namespace {
// The driver's cuTensorMapEncodeTiled, found once through the runtime (CUDA 12.0's version of it).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 f = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return f;
}

CUtensorMap encode_tensor_map(const TensorMapSpec& m) {
  CUtensorMap map{};
  // Innermost first: `inner` elements of a row, `rows` rows of a head, the heads. Strides (in bytes)
  // of the outer two; the innermost is contiguous.
  const cuuint64_t size[3] = {cuuint64_t(m.inner), cuuint64_t(m.rows), cuuint64_t(m.heads)};
  const cuuint64_t stride[2] = {cuuint64_t(m.inner) * m.elem_bytes, cuuint64_t(m.rows) * m.inner * m.elem_bytes};
  const cuuint32_t box[3] = {cuuint32_t(m.box_inner), cuuint32_t(m.box_rows), 1};
  const cuuint32_t step[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&map, m.type, 3, const_cast<void*>(m.base), size, stride, box, step,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, m.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // out of bounds: zeros
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ") for heads = " +
                             std::to_string(m.heads) + ", rows = " + std::to_string(m.rows) + ", row of " +
                             std::to_string(m.inner) + " elements");
  return map;
}
}  // namespace

// The maps made so far, by everything the encoding reads. A map is a description: the address,
// the sizes, the strides, the box, the swizzle; it holds no reference to the memory. So a map from
// here is the one cuTensorMapEncodeTiled would make now, whatever happened to the buffers in
// between: other buffers or another shape make another key, and a buffer freed and allocated again
// at the same address with the same shape has the same map. Timed launches on the same buffers (the
// warm-up and every timed run after the first launch) find their three maps here, so that the
// encoding, host work, stays out of the timed window. Bounded: cleared when it has many entries.
CUtensorMap make_tensor_map(const TensorMapSpec& m) {
  using Key = std::tuple<const void*, int, int, int, int, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, CUtensorMap> made;
  const Key key{m.base, int(m.type), m.elem_bytes, m.inner, m.rows, m.heads, m.box_inner, m.box_rows, int(m.swizzle)};
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto found = made.find(key); found != made.end()) return found->second;
  if (made.size() >= 64) made.clear();
  const CUtensorMap map = encode_tensor_map(m);
  made.emplace(key, map);
  return map;
}

// Stage 08's tiles: 16-bit rows of d values, boxes of 64 values (the 128-byte swizzle's row).
CUtensorMap make_tensor_map(const void* base, bool bf16, int heads, int N, int d, int box_rows) {
  return make_tensor_map({base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, d, N,
                          heads, 64, box_rows, CU_TENSOR_MAP_SWIZZLE_128B});
}

void require_hopper(const char* variant) {
  const auto& g = course::gpu();
  course::require(g.available && g.cc_major == 9 && g.cc_minor == 0,
                  std::string(variant) + " needs a Hopper GPU (sm_90: H100, H200, GH200) for wgmma and TMA; " +
                      (g.available ? "this is " + g.name + " (sm_" + std::to_string(g.cc_major) +
                                         std::to_string(g.cc_minor) + ")"
                                   : g.why_not));
}

int* tile_counter() {  // one a GPU: stage 10 drives several from one process
  static int* counters[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  course::require(device < 64, "tile_counter: more than 64 GPUs");
  if (!counters[device]) {  // two ints of device memory for the process (no problem's memory), 0 from here on
    CUDA_CHECK(cudaMalloc(&counters[device], 2 * sizeof(int)));
    CUDA_CHECK(cudaMemset(counters[device], 0, 2 * sizeof(int)));
  }
  return counters[device];
}

unsigned persistent_grid(const Shape& s, const char* variant, int Br, int cap) {
  const long long tiles = 1LL * ((s.N + Br - 1) / Br) * s.heads();
  course::require(tiles < (1LL << 31), std::string(variant) + ": too many tiles (B·H·⌈N/Br⌉ >= 2^31)");
  course::require(cap >= 0, std::string(variant) + ": the grid cap is a count of blocks (0: one an SM)");
  const long long blocks = cap > 0 ? cap : course::gpu().sm_count;
  return unsigned(std::min(tiles, blocks));
}

int lpt_head_group(const Shape& s, int value_bytes, int requested) {
  const long long heads = s.heads();
  if (requested > 0) return int(std::min<long long>(requested, heads));
  return int(std::clamp((16LL << 20) / (2LL * s.N * s.d * value_bytes), 1LL, heads));
}

}  // namespace attention::fa3


namespace attention {

void launch_fa3_with_options(const std::string& variant, const Shape& s, course::Dtype t, const void* Q,
                             const void* K, const void* V, void* O, float* L, const PersistentOptions& o) {
  if (variant == "persistent") return launch_fa3_persistent_with(s, t, Q, K, V, O, L, o);
  if (variant == "three_warpgroups") return launch_fa3_three_warpgroups_with(s, t, Q, K, V, O, L, o);
  if (variant == "tuned") return launch_fa3_tuned_with(s, t, Q, K, V, O, L, o);
  if (variant == "tuned_lpt") return launch_fa3_tuned_lpt_with(s, t, Q, K, V, O, L, o);
  if (variant == "tile_overlap") return launch_fa3_tile_overlap_with(s, t, Q, K, V, O, L, o);
  throw course::UsageError("launch_fa3_with_options: '" + variant +
                           "' is not one of persistent, three_warpgroups, tuned, tuned_lpt, tile_overlap");
}

}  // namespace attention
