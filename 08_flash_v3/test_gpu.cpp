// Stage 08 on the GPU (a Hopper; the tests skip on any other GPU): every rung, fp16 and bf16, d = 64
// and 128, causal or not, N = 1 and N on both sides of a block (of 128 rows, and of 192: the last
// rung at d = 64), against float64 (O and L) with stage 06's rule; large logits; outlier channels;
// many heads; measured SM<->L2 traffic against the CPU count; bad input.
#include <cuda.h>  // CUtensorMap
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "testing/sanitizer.hpp"
#include "../06_flash_v2/algorithm.hpp"
#include "attention/device_run.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "testing/attention_gpu.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "gpu.hpp"
#include "kernels.cuh"
#include "variants.hpp"

using namespace attention;
using course::Dtype;
using attention::testing::check_result;
using attention::testing::run_gpu;

namespace attention::fa3 {
// fa3_host.cu (declared in fa3_common.cuh, which holds device code): a tensor map, from its cache
// when it made the same one before.
CUtensorMap make_tensor_map(const void* base, bool bf16, int heads, int N, int d, int box_rows);
}  // namespace attention::fa3

namespace {

// Inputs whose K has a few outlier channels (columns scaled by 20), as real models' keys do.
Inputs with_outlier_channels(const Shape& s, Dtype t, std::uint64_t seed) {
  Inputs in = make_inputs(s, t, seed);
  std::vector<float> K = in.K;
  for (std::size_t r = 0; r < K.size() / s.d; ++r)
    for (int c : {3, s.d / 2 + 1, s.d - 2}) K[r * s.d + c] *= 20.0f;
  in.Kh = course::round_in_place(t, K);
  in.K = K;
  return in;
}

// The ladder and the ablations (under compute-sanitizer, which is slow, tuned_lpt is left to its own
// test below: its kernel is the last rung's with another tile order).
std::vector<ForwardVariant> all_variants() {
  std::vector<ForwardVariant> all = v3_registry().rungs();
  for (const auto& v : v3_registry().ablations())
    if (!course::testing::under_sanitizer() || v.name != "tuned_lpt") all.push_back(v);
  return all;
}

}  // namespace

TEST_CASE("every rung matches float64 (O and L): fp16 and bf16, d = 64 and 128, causal or not, any N") {
  const bool sanitizer = course::testing::under_sanitizer();
  const std::vector<int> sizes =
      sanitizer ? std::vector<int>{1, 77, 200} : std::vector<int>{1, 7, 64, 127, 128, 129, 192, 193, 300, 1000};
  for (const auto& v : all_variants())
    for (Dtype t : v.dtypes)
      for (int d : v.ds)
        for (bool causal : {false, true})
          for (int N : sizes) {
            const Shape s{2, 3, N, d, causal};
            const auto in = make_inputs(s, t, course::fresh_seed());
            CAPTURE(v.name);
            const std::string dtype = course::name(t);
            CAPTURE(dtype);
            CAPTURE(s.text());
            CAPTURE(in.seed);
            check_result(s, t, in, run_gpu(v, s, t, in));
          }
}

TEST_CASE("large logits (Q times 30), outlier channels in K, and N = 4097 with many heads") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (const auto& v : all_variants())
    for (Dtype t : v.dtypes)
      for (int d : v.ds) {
        const Shape big{1, sanitizer ? 2 : 5, sanitizer ? 513 : 4097, d, true};
        const Shape loud{1, 2, 700, d, false};
        CAPTURE(v.name);
        const std::string dtype = course::name(t);
        CAPTURE(dtype);
        {
          const auto in = make_inputs(big, t, course::fresh_seed());
          CAPTURE(big.text());
          CAPTURE(in.seed);
          check_result(big, t, in, run_gpu(v, big, t, in));
        }
        {
          const auto in = make_inputs(loud, t, course::fresh_seed(), 30.0f);
          CAPTURE(loud.text());
          CAPTURE(in.seed);
          check_result(loud, t, in, run_gpu(v, loud, t, in));
        }
        {
          const auto in = with_outlier_channels(loud, t, course::fresh_seed());
          CAPTURE(loud.text());
          CAPTURE(in.seed);
          check_result(loud, t, in, run_gpu(v, loud, t, in));
        }
      }
}

TEST_CASE("the persistent rungs with few blocks: each block takes many tiles, one after another") {
  // At the sizes above most blocks of a persistent rung get one tile (there are more SMs than
  // tiles); here 1 or 3 blocks take all of them, so every hand-over between tiles is exercised: the
  // ring's phases across tiles, Q's slots, the tile counter, tile_overlap's S of the next tile.
  const bool sanitizer = course::testing::under_sanitizer();
  for (const char* name : {"persistent", "three_warpgroups", "tuned", "tile_overlap"})
    for (int blocks : {1, 3}) {
      ForwardVariant v = v3_registry().find(name);  // a copy: a reference through a temporary name warns (g++ 13)
      v.launch = [name, blocks](const Shape& s_, Dtype t_, const void* Q, const void* K, const void* V, void* O, float* L) {
        launch_fa3_with_options(name, s_, t_, Q, K, V, O, L, {blocks, 0});
      };
      for (Dtype t : v.dtypes)
        for (int d : v.ds)
          for (bool causal : {false, true})
            for (int N : sanitizer ? std::vector<int>{1, 300} : std::vector<int>{1, 129, 300, 1000}) {
              const Shape s{2, 3, N, d, causal};
              const auto in = make_inputs(s, t, course::fresh_seed());
              CAPTURE(v.name);
              CAPTURE(blocks);
              const std::string dtype = course::name(t);
              CAPTURE(dtype);
              CAPTURE(s.text());
              CAPTURE(in.seed);
              check_result(s, t, in, run_gpu(v, s, t, in));
            }
    }
}

TEST_CASE("the LPT order (tuned_lpt): groups of heads that do not divide the heads, few blocks") {
  // Causal tiles in groups of heads, a group's heaviest first: with 7 heads in groups of 3 the last
  // group has one head, and with 1 or 3 blocks every tile is handed over. The order must map the tile
  // numbers one to one onto (head, query block): a tile that no number reaches leaves its rows of O
  // and L as poisoned.
  const bool sanitizer = course::testing::under_sanitizer();
  for (int group : {3, 2, 0})  // 0: by size, here all 7 heads
    for (int blocks : {1, 3, 0}) {
      ForwardVariant v = v3_registry().find("tuned_lpt");
      v.launch = [blocks, group](const Shape& s_, Dtype t_, const void* Q, const void* K, const void* V, void* O, float* L) {
        launch_fa3_with_options("tuned_lpt", s_, t_, Q, K, V, O, L, {blocks, group});
      };
      for (int d : v.ds)
        for (int N : sanitizer ? std::vector<int>{300} : std::vector<int>{1, 300, 1000}) {
          const Shape s{1, 7, N, d, true};
          const Dtype t = d == 64 ? Dtype::fp16 : Dtype::bf16;
          const auto in = make_inputs(s, t, course::fresh_seed());
          CAPTURE(group);
          CAPTURE(blocks);
          CAPTURE(s.text());
          CAPTURE(in.seed);
          check_result(s, t, in, run_gpu(v, s, t, in));
        }
    }
}

TEST_CASE("bad input: dtypes and head dimensions the rungs do not take, empty shapes") {
  course::DeviceBuffer<float> b(1024);
  float* p = b.get();
  for (const auto& v : v3_registry().rungs()) {
    CAPTURE(v.name);
    CHECK_THROWS_AS(v.launch(Shape{1, 1, 4, 64, false}, Dtype::fp32, p, p, p, p, p), course::UsageError);
    CHECK_THROWS_AS(v.launch(Shape{1, 1, 4, 32, false}, Dtype::fp16, p, p, p, p, p), course::UsageError);
    CHECK_THROWS_AS(v.launch(Shape{1, 1, 0, 64, false}, Dtype::bf16, p, p, p, p, p), course::UsageError);
  }
}

TEST_CASE("stage 08 kernels: measured SM<->L2 traffic is the counted traffic (TMA: the boxes it delivers)") {
  if (course::testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  for (const auto& v : v3_registry().rungs())
    for (auto [N, d, causal] : std::vector<std::array<int, 3>>{{1024, 64, 0}, {1000, 128, 1}, {517, 64, 1}}) {
      const Dtype t = v.dtypes.front();
      const Shape s{2, 2, N, d, causal != 0};
      const Tiles tiles = v.tiles(s);
      CAPTURE(v.name);
      CAPTURE(s.text());
      const auto in = make_inputs(s, t, course::fresh_seed());
      std::vector<float> O(s.elements()), L(std::size_t(s.heads()) * N);
      const auto counted = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
      DeviceRun dev(s, t, in);
      const auto r = course::measure_traffic([&] { v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); });
      if (!r.traffic) {
        MESSAGE("counters unavailable: " << r.why_not);
        return;
      }
      // cp.async (rung 1) reads what the CPU count reads; TMA delivers whole boxes (zero-filled past
      // N), and the crossbar counter counts them. Writes (O and L, plain stores) are the count's.
      // Rung 6 adds its tile counter's atomics (a sector read and written a tile and a block: its
      // grid is one block a SM, or a block a tile when there are fewer tiles).
      const int tile_count = query_blocks(s, tiles) * s.heads();
      const double atomics = tile_counter_bytes(s, tiles, v.name, std::min(tile_count, course::gpu().sm_count));
      const double reads =
          atomics + (loads_with_tma(v.name) ? tma_delivered_read_bytes(s, t, tiles) : double(counted.read_bytes));
      const double writes = atomics + double(counted.write_bytes);
      MESSAGE(v.name << " " << s.text() << ": measured SM<->L2 reads / expected " << r.traffic->l2_read_bytes / reads
                     << " (/ counted " << r.traffic->l2_read_bytes / double(counted.read_bytes) << "), writes / expected "
                     << r.traffic->l2_write_bytes / writes);
      const double eps = N % 8 == 0 ? 1e-3 : 1e-2;
      CHECK(r.traffic->l2_read_bytes == doctest::Approx(reads).epsilon(eps));
      CHECK(r.traffic->l2_write_bytes == doctest::Approx(writes).epsilon(eps));
    }
}

TEST_CASE("tensor maps: the same arguments give the same map (kept), other buffers or shapes their own") {
  // The TMA rungs' maps are kept by what the encoding reads (fa3_host.cu), so that timed launches on
  // the same buffers do not encode them again. A launch on buffers freed and allocated again (often
  // at the same address) or of another shape must still be right.
  const ForwardVariant tuned = v3_registry().find("tuned");  // a copy, as above
  for (int d : {64, 128})
    for (int N : {1000, 517, 1000}) {
      const Shape s{1, 3, N, d, N == 517};
      const auto in = make_inputs(s, Dtype::fp16, course::fresh_seed());
      CAPTURE(s.text());
      CAPTURE(in.seed);
      check_result(s, Dtype::fp16, in, run_gpu(tuned, s, Dtype::fp16, in));  // a new DeviceRun each time
    }
  course::DeviceBuffer<std::uint16_t> a(2 * 256 * 64), b(2 * 256 * 64);
  const CUtensorMap first = fa3::make_tensor_map(a.get(), false, 2, 256, 64, 128);
  const CUtensorMap again = fa3::make_tensor_map(a.get(), false, 2, 256, 64, 128);
  const CUtensorMap other = fa3::make_tensor_map(b.get(), false, 2, 256, 64, 128);
  const CUtensorMap shorter = fa3::make_tensor_map(a.get(), false, 2, 200, 64, 128);
  CHECK(std::memcmp(&first, &again, sizeof first) == 0);
  CHECK(std::memcmp(&first, &other, sizeof first) != 0);
  CHECK(std::memcmp(&first, &shorter, sizeof first) != 0);
}
