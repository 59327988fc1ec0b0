// Stage 02 on the CPU: the tiled algorithms through the counting view.
#include <doctest/doctest.h>

#include "algorithm.hpp"
#include "test_util.hpp"

using namespace matmul;

namespace {
const std::pair<const char*, Counted> kAlgorithms[] = {{"smem_tiled", tiled_counted},
                                                       {"register_blocked", register_blocked_counted}};
}

TEST_CASE("tiled algorithms (CPU, counting view) compute C = A·B on ragged and aligned shapes") {
  for (const auto& [name, algorithm] : kAlgorithms) {
    for (auto s : std::vector<testing::Shape>{{1, 1, 1}, {17, 33, 65}, {130, 129, 132}, {1031, 40, 21}}) {
      CAPTURE(name);
      testing::check_against_reference(s, [&](const auto& A, const auto& B) {
        std::vector<float> C(std::size_t(s.M) * s.N, NAN);
        algorithm(A.data(), B.data(), C.data(), s.M, s.N, s.K);
        return C;
      });
    }
  }
}

TEST_CASE("tiled algorithms: counted bytes equal the model wherever it is exact") {
  const std::vector<testing::Shape> shapes = {{64, 64, 64}, {100, 72, 40}, {33, 256, 136}, {256, 128, 8}};
  for (const auto& s : shapes) {
    REQUIRE(tiled_model_exact(s.M, s.N, s.K));
    const auto A = course::random_uniform(std::size_t(s.M) * s.K, course::fresh_seed());
    const auto B = course::random_uniform(std::size_t(s.K) * s.N, course::fresh_seed());
    std::vector<float> C(std::size_t(s.M) * s.N);
    CAPTURE(s.M);
    CAPTURE(s.N);
    CAPTURE(s.K);
    CHECK(double(tiled_counted(A.data(), B.data(), C.data(), s.M, s.N, s.K).total()) ==
          tiled_model_bytes(s.M, s.N, s.K, kTile, kTile));
    CHECK(double(register_blocked_counted(A.data(), B.data(), C.data(), s.M, s.N, s.K).total()) ==
          tiled_model_bytes(s.M, s.N, s.K, kBM, kBN));
  }
}

TEST_CASE("tiled model: global reads fall by the tile size") {
  // Square n: reads are 8n³/T bytes. Doubling the tile halves them; the writes stay 4n².
  const int n = 1024;
  const double writes = 4.0 * n * n;
  const double t32 = tiled_model_bytes(n, n, n, 32, 32) - writes;
  const double t64 = tiled_model_bytes(n, n, n, 64, 64) - writes;
  const double t128 = tiled_model_bytes(n, n, n, 128, 128) - writes;
  CHECK(t32 == 8.0 * n * n * n / 32);
  CHECK(t32 / t64 == 2.0);
  CHECK(t32 / t128 == 4.0);
}

TEST_CASE("tiled model: exactness conditions") {
  CHECK(tiled_model_exact(7, 8, 16));
  CHECK_FALSE(tiled_model_exact(8, 12, 16));
  CHECK_FALSE(tiled_model_exact(8, 16, 4));
}

TEST_CASE("register_blocked (CPU): the 4-byte path reads like the 16-byte one, writes C's sectors 4x") {
  // K = 9 forces 4-byte accesses. Reads: rows of A start off the sector grid either way. Writes:
  // a warp's 4-byte store touches every other float of 16-byte strides, so each sector of C is
  // written by four instructions instead of one.
  const int M = 128, N = 256, K = 9;
  const auto A = course::random_uniform(std::size_t(M) * K, course::fresh_seed());
  const auto B = course::random_uniform(std::size_t(K) * N, course::fresh_seed());
  std::vector<float> C(std::size_t(M) * N);
  REQUIRE_FALSE(register_blocked_vectorized(N, K));
  const auto io = register_blocked_counted(A.data(), B.data(), C.data(), M, N, K);
  CHECK(io.write_bytes == 4u * 4u * M * N);
  CHECK(io.read_bytes >= 4u * (std::size_t(M) * K * 2 + std::size_t(K) * N));
}
