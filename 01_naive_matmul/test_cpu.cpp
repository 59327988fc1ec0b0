// Stage 01 on the CPU: the reference, and the naive algorithm through the counting view.
#include <doctest/doctest.h>

#include "algorithm.hpp"
#include "reference.hpp"
#include "test_util.hpp"

using namespace matmul;

TEST_CASE("reference: a product worked by hand") {
  const std::vector<float> A = {1, 2, 3, 4, 5, 6};     // 2x3
  const std::vector<float> B = {7, 8, 9, 10, 11, 12};  // 3x2
  const auto C = reference(A.data(), B.data(), 2, 2, 3);
  CHECK(C == std::vector<double>{58, 64, 139, 154});
  CHECK(reference_entry(A.data(), B.data(), 2, 3, 1, 0) == 139.0);
}

TEST_CASE("reference: one entry equals the full product's entry") {
  const auto A = course::random_uniform(37 * 53, course::fresh_seed());
  const auto B = course::random_uniform(53 * 29, course::fresh_seed());
  const auto C = reference(A.data(), B.data(), 37, 29, 53);
  for (int i : {0, 17, 36})
    for (int j : {0, 5, 28})
      CHECK(reference_entry(A.data(), B.data(), 29, 53, i, j) ==
            doctest::Approx(C[std::size_t(i) * 29 + j]).epsilon(1e-12));
}

TEST_CASE("naive algorithm (CPU, counting view) computes C = A·B for both layouts") {
  for (Naive layout : {Naive::uncoalesced, Naive::coalesced}) {
    for (auto s : std::vector<testing::Shape>{{1, 1, 1}, {17, 33, 65}, {64, 96, 40}, {1030, 33, 17}}) {
      CAPTURE(name(layout));
      testing::check_against_reference(s, [&](const std::vector<float>& A, const std::vector<float>& B) {
        std::vector<float> C(std::size_t(s.M) * s.N, NAN);
        naive_counted(layout, A.data(), B.data(), C.data(), s.M, s.N, s.K);
        return C;
      });
    }
  }
}

TEST_CASE("naive algorithm: counted bytes equal the model wherever the model is exact") {
  const std::vector<testing::Shape> exact = {{32, 32, 8}, {64, 96, 40}, {96, 32, 16}, {128, 64, 24}};
  for (const auto& s : exact) {
    for (Naive layout : {Naive::uncoalesced, Naive::coalesced}) {
      CAPTURE(name(layout));
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      REQUIRE(naive_model_exact(layout, s.M, s.N, s.K));
      const auto A = course::random_uniform(std::size_t(s.M) * s.K, course::fresh_seed());
      const auto B = course::random_uniform(std::size_t(s.K) * s.N, course::fresh_seed());
      std::vector<float> C(std::size_t(s.M) * s.N);
      const auto io = naive_counted(layout, A.data(), B.data(), C.data(), s.M, s.N, s.K);
      CHECK(double(io.total()) == naive_model_bytes(layout, s.M, s.N, s.K));
    }
  }
}

TEST_CASE("naive algorithm: coalescing is what separates the two layouts") {
  const int M = 64, N = 64, K = 32;
  const auto A = course::random_uniform(M * K, course::fresh_seed());
  const auto B = course::random_uniform(K * N, course::fresh_seed());
  std::vector<float> C(M * N);
  const auto u = naive_counted(Naive::uncoalesced, A.data(), B.data(), C.data(), M, N, K);
  const auto c = naive_counted(Naive::coalesced, A.data(), B.data(), C.data(), M, N, K);
  CHECK(u.read_bytes == 33u * M * N * K);  // 32 sectors of A + 1 of B per warp and k
  CHECK(c.read_bytes == 5u * M * N * K);   // 1 sector of A + 4 of B per warp and k
  CHECK(u.write_bytes == 8 * c.write_bytes);
  // Coalesced moves fewer bytes than the threads ask for (the A broadcast is one sector).
  CHECK(double(c.total()) < logical_bytes(M, N, K));
  CHECK(double(u.total()) > logical_bytes(M, N, K));
}

TEST_CASE("naive model: exactness conditions") {
  CHECK(naive_model_exact(Naive::coalesced, 7, 64, 3));
  CHECK_FALSE(naive_model_exact(Naive::coalesced, 64, 65, 64));
  CHECK(naive_model_exact(Naive::uncoalesced, 64, 8, 8));
  CHECK_FALSE(naive_model_exact(Naive::uncoalesced, 64, 8, 4));
  CHECK_FALSE(naive_model_exact(Naive::uncoalesced, 65, 8, 8));
}
