// Stage 09 on the GPU (a Hopper; the tests skip on any other GPU): the quantisation kernels give the
// CPU's bytes and scales exactly (every scheme, fp16 and bf16, d = 64 and 128, N on both sides of a
// block); the FP8 attention against float64 (O and L) within twice plain FP8's error, for every
// scheme, causal or not, any N; large logits and outliers; NaN and inf refused; bad shapes. The
// ablations and experiments held to the same bound; O on the tensor cores on inputs of mean 0 and
// 0.5 (V centred), and its drift on inputs of mean 0.5 with V uncentred asserted.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "testing/sanitizer.hpp"
#include "attention/problem.hpp"
#include "accuracy.hpp"
#include "check.hpp"
#include "device_buffer.hpp"
#include "device_fp8.hpp"
#include "fp8.hpp"
#include "../08_flash_v3/kernels.cuh"  // fa3_set_grid_cap
#include "kernels.cuh"

using namespace attention;
using namespace attention::fp8;
using course::Dtype;

namespace {

struct Run {
  QuantizedInputs cpu;  // the CPU's quantisation of the same inputs
  std::vector<std::uint8_t> Q, K, Vt;
  std::vector<float> q_scale, k_scale, v_scale, v_mean, O, L;
};

// What a test may change between the quantisation and the attention (the CPU's quantisation and the
// device's buffers alike), or nothing.
using BeforeAttention = std::function<void(QuantizedInputs&, Fp8Buffers&)>;

// Quantises in by `scheme` on the GPU, runs the FP8 attention on poisoned O and L, brings it all back.
Run run(const Shape& s, Dtype t, const Inputs& in, Scheme scheme, std::uint64_t sign_seed,
        const BeforeAttention& before_attention = {}) {
  Run r;
  r.cpu = quantize_inputs(s, in.Q, in.K, in.V, scheme, sign_seed);
  course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(in.Kh), V(in.Vh), O(s.elements());
  course::DeviceBuffer<float> L(std::size_t(s.heads()) * s.N);
  Fp8Buffers q(s);
  O.poison();
  L.poison();
  q.Q.poison();
  q.Vt.poison();
  launch_quantize(s, t, scheme, r.cpu.signs, Q.get(), K.get(), V.get(), q.view());
  check_quantized(s, q.view());
  if (before_attention) before_attention(r.cpu, q);
  launch_attention(s, t, q.view(), O.get(), L.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  r.Q = q.Q.download(), r.K = q.K.download(), r.Vt = q.Vt.download();
  r.q_scale = q.q_scale.download(), r.k_scale = q.k_scale.download(), r.v_scale = q.v_scale.download();
  r.v_mean = q.v_mean.download();
  r.O = course::to_floats(t, O.download());
  r.L = L.download();
  return r;
}

std::size_t differing(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

void check(const Shape& s, Dtype t, const Inputs& in, Scheme scheme, std::uint64_t seed,
           const BeforeAttention& before_attention = {}) {
  const Run r = run(s, t, in, scheme, seed, before_attention);
  // The quantisation: the CPU's bytes and scales, exactly (the same float operations in the same order).
  CHECK(differing(r.Q, r.cpu.Q.bytes) == 0);
  CHECK(differing(r.K, r.cpu.K.bytes) == 0);
  CHECK(differing(r.Vt, transpose_v(r.cpu.V)) == 0);
  CHECK(r.q_scale == r.cpu.Q.scale);
  CHECK(r.k_scale == r.cpu.K.scale);
  CHECK(r.v_scale == r.cpu.V.scale);
  CHECK(r.v_mean == r.cpu.v_mean);
  // The attention: within twice plain FP8's error of float64.
  const Fp8Reference ref(s, t, in.Q, in.K, in.V, r.cpu);
  // P̃ by the lin rule (up to 3.1% off 2^x, 1% high on average): L may sit up to log 1.031 from plain FP8's.
  const double lin_L = fp8::p_by_lin() ? std::log1p(kLinMaxRelError) : 0.0;
  const auto O = ref.check_O(r.O.data()), L = ref.check_L(r.L.data(), lin_L);
  INFO("O: " << O.summary() << " (plain FP8 " << ref.plain_error_O() << ")\n" << O.first_mismatches);
  INFO("L: " << L.summary() << " (plain FP8 " << ref.plain_error_L() << ")\n" << L.first_mismatches);
  CHECK(O.ok());
  CHECK(L.ok());
}

// An ablation's kernel at both d, causal or not, ragged N, every scheme: held to the same bound.
void check_ablation() {
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int N : {129, 1000}) {
        const Shape s{1, 2, N, d, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        for (const Scheme& scheme : schemes()) check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), scheme, seed);
      }
}

}  // namespace

TEST_CASE("every scheme: the CPU's bytes and scales, and O and L within twice plain FP8's error of float64") {
  const std::vector<int> Ns = course::testing::under_sanitizer() ? std::vector<int>{1, 300}
                                                                   : std::vector<int>{1, 77, 128, 129, 300, 1000};
  for (Dtype t : {Dtype::fp16, Dtype::bf16})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int N : Ns)
          for (const Scheme& scheme : schemes()) {
            const Shape s{1, 3, N, d, causal};
            const std::uint64_t seed = course::fresh_seed();
            const Inputs in = make_inputs(s, t, seed);
            CAPTURE(s.text());
            const std::string dtype = course::name(t), name = scheme.name();
            CAPTURE(dtype);
            CAPTURE(name);
            CAPTURE(seed);
            check(s, t, in, scheme, seed);
          }
}

TEST_CASE("large logits (Q times 20), FA-3's outlier inputs, many heads and N = 4097") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  for (const Scheme& scheme : schemes()) {
    const std::string name = scheme.name();
    CAPTURE(name);
    {
      const Shape s{2, 2, 513, 128, true};
      check(s, Dtype::bf16, make_inputs(s, Dtype::bf16, seed, 20.0f), scheme, seed);
    }
    {
      const Shape s{1, 2, 1000, 128, false};
      check(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed, 0.001, 10.0), Dtype::fp16, seed), scheme,
            seed);
    }
    if (!course::testing::under_sanitizer()) {
      const Shape s{4, 16, 4097, 64, true};
      check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), scheme, seed);
    }
  }
}

namespace {
// --exp2-poly-every k, reset when the case ends or throws.
struct Poly {
  explicit Poly(int k) { fp8::set_exp2_poly_every(k); }
  ~Poly() { fp8::set_exp2_poly_every(0); }
};
}  // namespace

TEST_CASE("the experiment --exp2-poly-every: a share of the exponentials by polynomial keeps the same bound") {
  for (int k : {4, 8}) {
    const Poly poly(k);
    CAPTURE(k);
    for (bool causal : {false, true})
      for (int N : {129, 1000}) {
        const Shape s{1, 2, N, 128, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), schemes().front(), seed);
      }
  }
  CHECK_THROWS_AS(fp8::set_exp2_poly_every(3), course::UsageError);
}

TEST_CASE("the ablation fp8_*_fadd: the row sum by FADDs (the kernel before the tensor cores summed it) keeps the bound") {
  struct Fadd {
    Fadd() { fp8::set_row_sum_by_mma(false); }
    ~Fadd() { fp8::set_row_sum_by_mma(true); }
  } fadd;
  check_ablation();
}

TEST_CASE("the ablations fp8_*_preg and fp8_*_psmem: P in registers or through shared memory at every d keep the bound") {
  struct Where {
    explicit Where(fp8::POperand w) { fp8::set_p_operand(w); }
    ~Where() { fp8::set_p_operand(fp8::POperand::by_d); }
  };
  for (const fp8::POperand where : {fp8::POperand::registers, fp8::POperand::shared}) {
    const Where at(where);
    CAPTURE(where == fp8::POperand::shared ? "P through shared memory" : "P in registers");
    check_ablation();
  }
}

TEST_CASE("the experiment fp8_*_lin: P̃ from fp16's bit pattern in the default kernel keeps the bound, large logits too") {
  struct Lin {
    Lin() { fp8::set_lin_p(true); }
    ~Lin() { fp8::set_lin_p(false); }
  } lin;
  struct Shared {  // fp8_*_lin_psmem: P̃ through shared memory at every d (reset when the scope ends or throws)
    Shared() { fp8::set_p_operand(fp8::POperand::shared); }
    ~Shared() { fp8::set_p_operand(fp8::POperand::by_d); }
  };
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  if (course::testing::under_sanitizer()) {  // the sanitizers: both d, causal or not, one ragged N, two schemes
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        const Shape s{1, 2, 129, d, causal};
        CAPTURE(s.text());
        for (const Scheme& scheme : {schemes().front(), schemes().back()})
          check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), scheme, seed);
      }
    const Shared shared;  // and _lin_psmem at d = 64 (at d = 128 the default's P̃ is in shared memory already)
    const Shape s{1, 2, 129, 64, true};
    check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), schemes().front(), seed);
    return;
  }
  check_ablation();
  {
    const Shared shared;
    check_ablation();
  }
  for (int d : {64, 128}) {
    CAPTURE(d);
    const Shape big{2, 2, 513, d, true}, outliers{1, 2, 1000, d, false};
    for (const Scheme& scheme : schemes()) {
      const std::string name = scheme.name();
      CAPTURE(name);
      check(big, Dtype::bf16, make_inputs(big, Dtype::bf16, seed, 20.0f), scheme, seed);
      check(outliers, Dtype::fp16, to_inputs(normal_inputs(outliers, Dtype::fp16, seed, 0.001, 10.0), Dtype::fp16, seed),
            scheme, seed);
    }
    // The lin kernel ran, not the default: its P̃ differs from ex2's in many keys' e4m3 bytes, so over 1000 keys a row
    // nearly every value of O differs from the default kernel's on the same quantised inputs (both within the bound).
    const Shape s{1, 2, 1000, d, false};
    const Inputs in = make_inputs(s, Dtype::fp16, seed);
    const std::vector<float> O_lin = run(s, Dtype::fp16, in, schemes().front(), seed).O;
    fp8::set_lin_p(false);
    const std::vector<float> O_ex2 = run(s, Dtype::fp16, in, schemes().front(), seed).O;
    fp8::set_lin_p(true);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < O_lin.size(); ++i) differ += O_lin[i] != O_ex2[i];
    MESSAGE("d = " << d << ": " << differ << " of O's " << O_lin.size() << " values differ from the default kernel's");
    CHECK(differ > O_lin.size() / 2);
  }
  // With another experiment or ablation: refused, not run.
  const Shape s{1, 1, 129, 64, false};
  const Inputs in = make_inputs(s, Dtype::fp16, seed);
  auto refused = [&](const char* what, const std::function<void()>& set, const std::function<void()>& reset) {
    CAPTURE(what);
    set();
    CHECK_THROWS_AS(run(s, Dtype::fp16, in, schemes().front(), seed), course::UsageError);
    reset();
  };
  refused("the row sum by FADDs", [] { fp8::set_row_sum_by_mma(false); }, [] { fp8::set_row_sum_by_mma(true); });
  refused("the polynomial", [] { fp8::set_exp2_poly_every(4); }, [] { fp8::set_exp2_poly_every(0); });
  refused("O on the tensor cores", [] { fp8::set_o_on_tensor_cores(3, false); }, [] { fp8::set_o_on_tensor_cores(0); });
  const Shape w{1, 1, 129, 128, false};
  fp8::set_wide_key_blocks(fp8::Wide::overlap_stsm, Granularity::tensor);
  Scheme centred_tensor = schemes().front();
  centred_tensor.centre_v = true;
  CHECK_THROWS_AS(run(w, Dtype::fp16, make_inputs(w, Dtype::fp16, seed), centred_tensor, seed), course::UsageError);
  fp8::set_wide_key_blocks(fp8::Wide::off, Granularity::tensor);
}

namespace {
// The experiment O on the tensor cores (set_o_on_tensor_cores), reset when the case ends or throws.
struct OnTensorCores {
  OnTensorCores(int warpgroups, bool lazy) { fp8::set_o_on_tensor_cores(warpgroups, lazy); }
  ~OnTensorCores() { fp8::set_o_on_tensor_cores(0); }
};
struct AccVariant {
  const char* name;
  int warpgroups;
  bool lazy;
};
constexpr AccVariant kAccVariants[] = {{"acc2", 2, false}, {"acc3", 3, false}, {"lazy3", 3, true}};
// The wide rung (set_wide_key_blocks), reset when the case ends or throws.
struct WideBlocks {
  explicit WideBlocks(fp8::Wide kernel = fp8::Wide::rung) { fp8::set_wide_key_blocks(kernel, Granularity::tensor); }
  ~WideBlocks() { fp8::set_wide_key_blocks(fp8::Wide::off); }
};
// The persistent grid capped at `blocks` thread blocks (0: no cap), reset when the case ends or throws.
struct Cap {
  explicit Cap(int blocks) { fa3_set_grid_cap(blocks); }
  ~Cap() { fa3_set_grid_cap(0); }
};
// N(0, 1) inputs whose keys are scaled up block by block in the order the kernels visit them (the
// last block first): key j by 1 + (the 256-key blocks after j's), so that a row's max grows by about
// 4 log₂ units a block, past the optimistic step's headroom (3), and its fallback runs in most blocks.
// N(0, 1) inputs where one query row in 16 (one a warp) rises and the others stay level: K's first
// column grows by 8 a block in the visiting order, and only those rows' Q has 4 there (the others
// 0). The rising row falls back every block; its warp's level rows must keep their m (a rule that
// raised every row's m at each fallback would push their later blocks below e4m3's range).
Inputs one_rising_row(const Shape& s, Dtype t, std::uint64_t seed) {
  NormalInputs n = normal_inputs(s, t, seed);
  const int blocks = (s.N + 255) / 256;
  for (int h = 0; h < s.heads(); ++h)
    for (int j = 0; j < s.N; ++j) {
      const std::size_t at = (std::size_t(h) * s.N + j) * s.d;
      n.K[at] += 8.0f * float(blocks - 1 - j / 256);
      n.Q[at] = j % 16 == 0 ? 4.0f : 0.0f;
    }
  for (float& k : n.K) k = course::round_to(t, k);
  return to_inputs(n, t, seed);
}
Inputs rising_keys(const Shape& s, Dtype t, std::uint64_t seed) {
  NormalInputs n = normal_inputs(s, t, seed);
  const int blocks = (s.N + 255) / 256;
  for (int h = 0; h < s.heads(); ++h)
    for (int j = 0; j < s.N; ++j)
      for (int c = 0; c < s.d; ++c) n.K[(std::size_t(h) * s.N + j) * s.d + c] *= 1.0f + float(blocks - 1 - j / 256);
  for (float& k : n.K) k = course::round_to(t, k);
  return to_inputs(n, t, seed);
}
}  // namespace

TEST_CASE("the experiment fp8_*_acc2, _acc3, _lazy3 (O on the tensor cores) keeps the bound, V centred") {
  for (const AccVariant& v : kAccVariants) {
    const OnTensorCores on(v.warpgroups, v.lazy);
    const std::string variant = v.name;
    CAPTURE(variant);
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int N : {129, 1000}) {
          if (N == 1000 && course::testing::under_sanitizer()) continue;
          const Shape s{1, 2, N, d, causal};
          const std::uint64_t seed = course::fresh_seed();
          CAPTURE(s.text());
          CAPTURE(seed);
          // Zero-mean inputs, and stage 06's (uniform in [−1, 2), mean 0.5: V centred by the quantisation).
          const Inputs zero_mean = to_inputs(normal_inputs(s, Dtype::fp16, seed), Dtype::fp16, seed),
                       offset = make_inputs(s, Dtype::fp16, seed);
          if (v.warpgroups == 2 && d != 128) {
            CHECK_THROWS_AS(run(s, Dtype::fp16, zero_mean, schemes().front(), seed), course::UsageError);
            continue;
          }
          for (const Scheme& scheme : schemes()) {
            check(s, Dtype::fp16, zero_mean, centred(scheme), seed);
            check(s, Dtype::fp16, offset, centred(scheme), seed);
          }
        }
  }
  CHECK_THROWS_AS(fp8::set_o_on_tensor_cores(4), course::UsageError);
  CHECK_THROWS_AS(fp8::set_o_on_tensor_cores(2, true), course::UsageError);
}

// Key blocks of 256: ragged N on both sides of a block and of K's two descales in it (N = 300: the
// last block's 44 keys lie in K's third 128-row block, with no fourth), causal or not, one row,
// fp16 and bf16, zero-mean, offset (V centred), large-logit, outlier and rising-key inputs; the two
// per-tensor schemes (the rung needs V's descale per tensor: the per-block ones are refused). The
// rung and each of its experiments (_wide_opt, the optimistic max, also with the polynomial;
// _wide_turns; _wide_epi; _wide_ovl; _wide_mask has a case of its own, after the next).
TEST_CASE("the wide rung fp8_*_wide and its experiments _wide_opt, _turns, _epi, _ovl (key blocks of 256) keep the bound, V centred") {
  for (fp8::Wide kernel : {fp8::Wide::rung, fp8::Wide::optimistic, fp8::Wide::turns, fp8::Wide::vbar_smem,
                           fp8::Wide::overlap}) {
    const WideBlocks wide(kernel);
    const int experiment = int(kernel);  // kernels.cuh's order: 1 the rung, 2 _wide_opt, ... 5 _wide_ovl
    CAPTURE(experiment);
    for (bool causal : {false, true})
      for (int N : {1, 129, 300, 1000, 2049}) {
        if (N > 1000 && course::testing::under_sanitizer()) continue;
        const Shape s{1, 2, N, 128, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        for (const Scheme& scheme : {schemes()[0], schemes()[2]}) {
          const Scheme c = centred(scheme);
          check(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed), Dtype::fp16, seed), c, seed);
          check(s, Dtype::bf16, make_inputs(s, Dtype::bf16, seed), c, seed);
          if (N >= 300) check(s, Dtype::fp16, rising_keys(s, Dtype::fp16, seed), c, seed);
          if (N >= 1000) check(s, Dtype::fp16, one_rising_row(s, Dtype::fp16, seed), c, seed);
          if (N == 1000) {
            check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed, 20.0f), c, seed);
            check(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed, 0.001, 10.0), Dtype::fp16, seed), c,
                  seed);
          }
        }
      }
  }
  for (int k : {4, 8}) {  // the optimistic step with a share of its exponentials by polynomial
    const WideBlocks wide(fp8::Wide::optimistic);
    const Poly poly(k);
    CAPTURE(k);
    for (bool causal : {false, true}) {
      const Shape s{1, 2, course::testing::under_sanitizer() ? 300 : 1000, 128, causal};
      const std::uint64_t seed = course::fresh_seed();
      CAPTURE(s.text());
      CAPTURE(seed);
      const Scheme c = centred(schemes()[0]);
      check(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed), Dtype::fp16, seed), c, seed);
      check(s, Dtype::fp16, rising_keys(s, Dtype::fp16, seed), c, seed);
    }
  }
  const WideBlocks wide;
  const Shape s64{1, 2, 300, 64, false};
  CHECK_THROWS_AS(run(s64, Dtype::fp16, make_inputs(s64, Dtype::fp16, 1), centred(schemes()[0]), 1), course::UsageError);
  CHECK_THROWS_AS(fp8::set_wide_key_blocks(fp8::Wide::rung, Granularity::block), course::UsageError);
  {
    const OnTensorCores acc(3, true);  // not with another experiment
    const Shape s{1, 2, 300, 128, false};
    CHECK_THROWS_AS(run(s, Dtype::fp16, make_inputs(s, Dtype::fp16, 1), centred(schemes()[0]), 1), course::UsageError);
  }
}

// The wide kernels with 1 or 3 blocks: each block takes many tiles one after another, so every
// hand-over between tiles is exercised (the ring's phases, Q's slot, v̄'s two slots, O's staging in a
// P̃ tile, and _wide_ovl's next S issued under the last P̃·V, with a key block skipped before it where
// N64 is not a multiple of 128: N = 300, 700; _wide_qh's and _wide_diag's two halves of Q, each with
// its own phases, and the producer's slots of each tile's numbers).
TEST_CASE("the wide kernels with few blocks: each block takes many tiles, one after another") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (fp8::Wide kernel : {fp8::Wide::optimistic, fp8::Wide::vbar_smem, fp8::Wide::overlap, fp8::Wide::overlap_qhalves,
                           fp8::Wide::overlap_diagonal, fp8::Wide::overlap_q_prefetch,
                           fp8::Wide::overlap_log2, fp8::Wide::overlap_stsm, fp8::Wide::overlap_lin}) {
    const WideBlocks wide(kernel);
    const int experiment = int(kernel);
    CAPTURE(experiment);
    for (int blocks : {1, 3}) {
      const Cap cap(blocks);
      CAPTURE(blocks);
      for (bool causal : {false, true})
        for (int N : sanitizer ? std::vector<int>{1, 300} : std::vector<int>{1, 129, 300, 700, 1000}) {
          const Shape s{2, 3, N, 128, causal};
          const std::uint64_t seed = course::fresh_seed();
          CAPTURE(s.text());
          CAPTURE(seed);
          const Scheme c = centred(schemes()[0]);
          check(s, Dtype::bf16, to_inputs(normal_inputs(s, Dtype::bf16, seed), Dtype::bf16, seed), c, seed);
          if (N == 700) check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), c, seed);
        }
    }
  }
  // _wide_ovl's causal tile order in groups of heads (set_head_group): 6 heads in groups of 4 (the
  // last one of 2) and of 1 (a head at a time), with 1 and 3 blocks; and _wide_diag's (Q by halves,
  // each tile's numbers from the producer).
  struct HeadGroup {
    explicit HeadGroup(int heads) { fp8::set_head_group(heads); }
    ~HeadGroup() { fp8::set_head_group(0); }
  };
  for (fp8::Wide kernel : {fp8::Wide::overlap, fp8::Wide::overlap_diagonal}) {
    const WideBlocks wide(kernel);
    for (int group : {4, 1})
      for (int blocks : {1, 3}) {
        const HeadGroup g(group);
        const Cap cap(blocks);
        const Shape s{2, 3, sanitizer ? 300 : 700, 128, true};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(int(kernel));
        CAPTURE(group);
        CAPTURE(blocks);
        CAPTURE(seed);
        check(s, Dtype::bf16, to_inputs(normal_inputs(s, Dtype::bf16, seed), Dtype::bf16, seed), centred(schemes()[0]),
              seed);
      }
  }
  CHECK_THROWS_AS(fp8::set_head_group(-1), course::UsageError);
}

// The experiment _wide_mask: _wide_ovl with the causal diagonal's mask by mask_causal where the block
// ends before N (tc::mask_scores where it does not, and for N itself). Causal and not (where it is
// _wide_ovl's code), N on both sides of a key block (N = 256, 257: a last block of one key), ragged N,
// one row, large logits and rising keys; one block taking every tile, and all. The same for
// _wide_diag, which leaves the diagonal's steps past a warp's rows out of the softmax: where the
// diagonal block ends before N (N = 256 and 257: the one block of N = 256, the first of 257) it
// takes the mask and the softmax of the tile's first block, and the other cases keep the old one.
// _wide_lg2 and _wide_stsm (L by lg2.approx; the staging by stmatrix) on the same cases: large logits and rising
// keys give L its widest range. _wide_lin (P̃'s bytes from fp16 bit patterns, without MUFU) too: its P̃ carries the
// linear mantissa's error (about ±3% after centring) beside e4m3's rounding (up to 6.25%), within the bound's factor
// of two over plain FP8 (a CPU model: P̃'s error rms 3.3% against 2.7%); large logits send P̃ below 2^-15 (far below
// the row's max), which the clamp (FFMA.SAT) must turn into zeros, never into another pattern's byte.
TEST_CASE("the experiments _wide_mask, _wide_diag, _wide_lg2, _wide_stsm and _wide_lin keep the bound") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (fp8::Wide kernel : {fp8::Wide::overlap_mask, fp8::Wide::overlap_diagonal, fp8::Wide::overlap_log2,
                           fp8::Wide::overlap_stsm, fp8::Wide::overlap_lin}) {
    const WideBlocks wide(kernel);
    CAPTURE(int(kernel));
    for (int blocks : {0, 1}) {
      const Cap cap(blocks);
      CAPTURE(blocks);
      for (bool causal : {true, false})
        for (int N : sanitizer ? std::vector<int>{1, 257, 300} : std::vector<int>{1, 129, 256, 257, 300, 1000, 2049}) {
          const Shape s{1, 2, N, 128, causal};
          const std::uint64_t seed = course::fresh_seed();
          CAPTURE(s.text());
          CAPTURE(seed);
          const Scheme c = centred(schemes()[0]);
          check(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed), Dtype::fp16, seed), c, seed);
          if (blocks == 0 && causal) {
            check(s, Dtype::bf16, make_inputs(s, Dtype::bf16, seed), centred(schemes()[2]), seed);
            if (N >= 300) check(s, Dtype::fp16, rising_keys(s, Dtype::fp16, seed), c, seed);
            if (N == 1000) check(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed, 20.0f), c, seed);
          }
        }
    }
  }
}

// Per tensor, every tile, warpgroup and key block has the same descales, so a wide kernel that took
// one from the wrong tile, warpgroup or key block would pass the cases above. Here Q's and K's
// per-tensor bytes are kept and each block of 128 rows has its descale multiplied by 2^e, e from -2
// to 2 and never the same in neighbouring blocks; V's, which the wide kernels take per head, by 2^e
// a head (and v̄ with it). The inputs' rows are multiplied alike, so the bytes stand for the scaled
// inputs as they did for the inputs, and O and L must keep the bound against float64 on those. At
// N = 300 and 2049 (causal tiles laid from N rounded up to 64) the two warpgroups of a tile read
// different Q blocks, and a warpgroup that skips the tile's last key block starts on the descales of
// the one before it; one block taking every tile checks the descales loaded a tile ahead.
TEST_CASE("the overlap kernels take each tile's, warpgroup's and key block's own descales") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (fp8::Wide kernel : {fp8::Wide::overlap, fp8::Wide::overlap_mask, fp8::Wide::overlap_decoded,
                           fp8::Wide::overlap_qhalves, fp8::Wide::overlap_diagonal, fp8::Wide::overlap_q_prefetch,
                           fp8::Wide::overlap_log2, fp8::Wide::overlap_stsm, fp8::Wide::overlap_lin}) {
    const WideBlocks wide(kernel);
    for (int blocks : {0, 1}) {
      const Cap cap(blocks);
      for (bool causal : {true, false})
        for (int N : sanitizer ? std::vector<int>{300} : std::vector<int>{300, 1000, 2049}) {
          const Shape s{1, 2, N, 128, causal};
          const std::uint64_t seed = course::fresh_seed();
          CAPTURE(int(kernel));
          CAPTURE(blocks);
          CAPTURE(s.text());
          CAPTURE(seed);
          // `in` is scaled by the hook below, after the quantisation read it and before check()
          // builds the float64 reference from it.
          Inputs in = make_inputs(s, Dtype::fp16, seed);
          // 2^e, e = (3x + seed) mod 5 − 2: x and x + 1 never get the same factor.
          auto factor = [&](int x) { return std::ldexp(1.0f, int((3 * std::uint64_t(x) + seed) % 5) - 2); };
          auto scale_rows = [&](std::vector<float>& x, int h, int r0, int r1, float f) {
            for (int r = r0; r < std::min(N, r1); ++r)
              for (int col = 0; col < s.d; ++col) x[(std::size_t(h) * N + r) * s.d + col] *= f;
          };
          auto rescale = [&](QuantizedInputs& cpu, Fp8Buffers& q) {
            std::vector<float> q_scale = q.q_scale.download(), k_scale = q.k_scale.download(),
                               v_scale = q.v_scale.download(), v_mean = q.v_mean.download();
            const int nb = cpu.Q.blocks();
            for (int h = 0; h < s.heads(); ++h) {
              for (int b = 0; b < nb; ++b) {
                const std::size_t hb = std::size_t(h) * nb + b;
                const float fq = factor(h * nb + b), fk = factor(h * nb + b + 2);
                q_scale[hb] *= fq, cpu.Q.scale[hb] *= fq, scale_rows(in.Q, h, b * kScaleRows, (b + 1) * kScaleRows, fq);
                k_scale[hb] *= fk, cpu.K.scale[hb] *= fk, scale_rows(in.K, h, b * kScaleRows, (b + 1) * kScaleRows, fk);
              }
              const float fv = factor(h + 1);
              for (int b = 0; b < nb; ++b) v_scale[std::size_t(h) * nb + b] *= fv, cpu.V.scale[std::size_t(h) * nb + b] *= fv;
              for (int col = 0; col < s.d; ++col) v_mean[std::size_t(h) * s.d + col] *= fv, cpu.v_mean[std::size_t(h) * s.d + col] *= fv;
              scale_rows(in.V, h, 0, N, fv);
            }
            q.q_scale.upload(q_scale);
            q.k_scale.upload(k_scale);
            q.v_scale.upload(v_scale);
            q.v_mean.upload(v_mean);
          };
          check(s, Dtype::fp16, in, centred(schemes()[0]), seed, rescale);
        }
    }
  }
}

// Why O on the tensor cores needs V centred: on inputs of mean 0.5, V as it is, a sum over all N keys
// in the tensor cores' accumulator loses a little of each (positive) term, and O comes out low.
// Measured on the H100: 3.5 % at N = 4096, 12 % at 16384 (chapter 09). The signed mean error of O on
// 64 rows, against float64: below −1 % with O on the tensor cores and V uncentred; within ±0.5 % for
// the fresh accumulator either way, and for O on the tensor cores with V centred.
TEST_CASE("O on the tensor cores drifts low on inputs of mean 0.5 at N = 4096 unless V is centred (also wide)") {
  const Shape s{1, 1, 4096, 128, false};
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  const Inputs in = make_inputs(s, Dtype::fp16, seed);  // uniform in [-1, 2)
  const int d = s.d, N = s.N;
  std::vector<double> ref;  // float64 O of rows 0, 64, 128, ...
  for (int r = 0; r < N; r += 64) {
    std::vector<double> x(N), o(d, 0.0);
    double m = -INFINITY, l = 0;
    for (int k = 0; k < N; ++k) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += double(in.Q[size_t(r) * d + c]) * in.K[size_t(k) * d + c];
      x[k] = dot / std::sqrt(double(d));
      m = std::max(m, x[k]);
    }
    for (int k = 0; k < N; ++k) {
      const double p = std::exp(x[k] - m);
      l += p;
      for (int c = 0; c < d; ++c) o[c] += p * in.V[size_t(k) * d + c];
    }
    for (int c = 0; c < d; ++c) ref.push_back(o[c] / l);
  }
  auto bias = [&](const Run& got) {
    double diff = 0, size = 0;
    size_t i = 0;
    for (int r = 0; r < N; r += 64)
      for (int c = 0; c < d; ++c, ++i) diff += got.O[size_t(r) * d + c] - ref[i], size += std::fabs(ref[i]);
    return diff / size;
  };
  for (const Scheme& scheme : {schemes().front(), centred(schemes().front())}) {
    const std::string name = scheme.name();
    CAPTURE(name);
    const double fresh = bias(run(s, Dtype::fp16, in, scheme, seed));
    MESSAGE(name << ", fresh accumulator: signed mean error of O " << fresh);
    CHECK(std::fabs(fresh) < 0.005);
    for (const AccVariant& v : kAccVariants) {
      const OnTensorCores on(v.warpgroups, v.lazy);
      const double drift = bias(run(s, Dtype::fp16, in, scheme, seed));
      const std::string variant = v.name;
      MESSAGE(name << ", " << variant << ": signed mean error of O " << drift);
      if (scheme.centre_v) CHECK(std::fabs(drift) < 0.005);
      else CHECK(drift < -0.01);
    }
    {
      const WideBlocks wide;
      const double drift = bias(run(s, Dtype::fp16, in, scheme, seed));
      MESSAGE(name << ", wide: signed mean error of O " << drift);
      if (scheme.centre_v) CHECK(std::fabs(drift) < 0.005);
      else CHECK(drift < -0.01);
    }
  }
}

TEST_CASE("bad input: NaN and inf refused by the quantisation, V's descales 2^129 apart too; d, dtypes, empty shapes and misaligned inputs refused") {
  const Shape s{1, 1, 200, 64, false};
  Inputs in = make_inputs(s, Dtype::fp16, course::fresh_seed());
  for (float bad : {NAN, INFINITY})
    for (int where : {1, 2}) {  // in K, in V (whose column means see it first)
      std::vector<float> x = where == 1 ? in.K : in.V;
      x[333] = bad;
      auto xh = course::round_in_place(Dtype::fp16, x);
      course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(where == 1 ? xh : in.Kh), V(where == 2 ? xh : in.Vh);
      Fp8Buffers q(s);
      for (const Scheme& scheme : {schemes()[0], schemes()[3], centred(schemes()[0]), centred(schemes()[3])}) {
        CAPTURE(where);
        launch_quantize(s, Dtype::fp16, scheme, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view());
        CHECK_THROWS_AS(check_quantized(s, q.view()), course::UsageError);
      }
    }
  {  // V per block, bf16: its first 128 keys near 1e-37 (a scale from 2^-119, a descale of 2^-127.8), the rest up to
     // 2000 (a descale near 4.5): 2^130 apart, past kMaxVScaleSpan, refused; per tensor (one descale) taken, and
     // centred too (v̄, about 180 in each column, brings the first block's values near −180: 2^3 apart)
    Inputs b = make_inputs(s, Dtype::bf16, course::fresh_seed());
    for (int k = 0; k < s.N; ++k)
      for (int c = 0; c < s.d; ++c) b.V[std::size_t(k) * s.d + c] *= k < kScaleRows ? 1e-37f : 1000.0f;
    const auto vh = course::round_in_place(Dtype::bf16, b.V);
    course::DeviceBuffer<std::uint16_t> Q(b.Qh), K(b.Kh), V(vh);
    Fp8Buffers q(s);
    for (const Scheme& scheme : {schemes()[1], schemes()[3]}) {
      CAPTURE(scheme.name());
      launch_quantize(s, Dtype::bf16, scheme, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view());
      CHECK_THROWS_AS(check_quantized(s, q.view()), course::UsageError);
    }
    for (const Scheme& scheme : {schemes()[0], centred(schemes()[1])}) {
      CAPTURE(scheme.name());
      launch_quantize(s, Dtype::bf16, scheme, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view());
      CHECK_NOTHROW(check_quantized(s, q.view()));
    }
  }
  course::DeviceBuffer<std::uint16_t> X(s.elements()), O(s.elements());
  course::DeviceBuffer<float> L(s.N);
  Fp8Buffers q(s);
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp32, schemes()[0], {}, X.get(), X.get(), X.get(), q.view()),
                  course::UsageError);
  CHECK_THROWS_AS(launch_attention(s, Dtype::fp32, q.view(), O.get(), L.get()), course::UsageError);
  // The quantisation loads a lane's part of a row as one word: an input 2 bytes off 8 (or, for Q and K with
  // the transform, 8 bytes off 16) is refused with a message rather than faulting on a misaligned load.
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, schemes()[0], {}, X.get() + 1, X.get(), X.get(), q.view()),
                  course::UsageError);
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, schemes()[0], {}, X.get(), X.get() + 1, X.get(), q.view()),
                  course::UsageError);
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, schemes()[0], {}, X.get(), X.get(), X.get() + 1, q.view()),
                  course::UsageError);
  for (int which : {0, 1})
    CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, schemes()[2], random_signs(64, 1), which == 0 ? X.get() + 4 : X.get(),
                                    which == 1 ? X.get() + 4 : X.get(), X.get(), q.view()),
                    course::UsageError);
  const Shape s32{1, 1, 200, 32, false};
  CHECK_THROWS_AS(launch_attention(s32, Dtype::fp16, q.view(), O.get(), L.get()), course::UsageError);
  const Shape empty{1, 1, 0, 64, false};
  CHECK_THROWS_AS(launch_attention(empty, Dtype::fp16, q.view(), O.get(), L.get()), course::UsageError);
}

// bf16 inputs below 2^-119 (amax 2e-37): the scales come from 2^-119 (else 448/amax is inf and a 0 a NaN byte).
// Q's and K's descales then multiply to below fp32's smallest value, which the kernels floor (score_unit): N = 300
// masks the last block's keys, causal the diagonal, and a masked score −inf times 0 would be NaN in the default
// kernel, the wide rung, _wide_diag and _wide_stsm (_lin and _wide_lin saturate it away, FFMA.SAT). And V's descale
// is 2^-127.8, so O = o · sv / l must take o / l first: sv / l is a subnormal of few bits (at N = 4096, 2 of them),
// O off by percents with V not centred (the default kernel and _lin at N = 4096; the wide kernels centre V).
TEST_CASE("bf16 inputs below 2^-119: the scale from 2^-119, the CPU's bytes, no NaN byte, O and L within the bound") {
  struct Lin {
    Lin() { fp8::set_lin_p(true); }
    ~Lin() { fp8::set_lin_p(false); }
  };
  const bool sanitizer = course::testing::under_sanitizer();
  for (int d : {64, 128})
    for (int N : sanitizer ? std::vector<int>{300} : std::vector<int>{300, 4096})
      for (bool causal : {false, true}) {
        if (N == 4096 && causal) continue;
        const Shape s{1, 2, N, d, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        const Inputs in = make_inputs(s, Dtype::bf16, seed, 1.0f, -1e-37f, 2e-37f);
        for (const Scheme& scheme : {schemes()[0], schemes()[1]}) {  // per tensor, per block
          CAPTURE(scheme.name());
          const Run r = run(s, Dtype::bf16, in, scheme, seed);
          for (const auto* scales : {&r.q_scale, &r.k_scale, &r.v_scale})
            CHECK(std::all_of(scales->begin(), scales->end(), [](float x) { return x == kMinAmax / kE4m3Max; }));
          for (const auto* bytes : {&r.Q, &r.K, &r.Vt})
            CHECK(std::none_of(bytes->begin(), bytes->end(), [](std::uint8_t b) { return (b & 0x7F) == 0x7F; }));
          check(s, Dtype::bf16, in, scheme, seed);  // the CPU's bytes and scales; O and L against float64
        }
        {
          const Lin lin;
          check(s, Dtype::bf16, in, schemes()[0], seed);
        }
        if (d == 128 && N == 300)
          for (fp8::Wide kernel : {fp8::Wide::rung, fp8::Wide::overlap_diagonal, fp8::Wide::overlap_stsm,
                                   fp8::Wide::overlap_lin}) {
            const WideBlocks wide(kernel);
            CAPTURE(int(kernel));
            check(s, Dtype::bf16, in, centred(schemes()[0]), seed);
          }
      }
}
