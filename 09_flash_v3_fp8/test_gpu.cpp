// Stage 09's FP8 attention on the GPU (a Hopper; the tests skip on any other GPU), rung by rung from
// the registry: O and L against float64 within twice plain FP8's error (and the quantisation's bytes
// and scales equal to the CPU's, in every case), for every scheme a rung takes, causal or not, any N,
// fp16 and bf16; large logits, outliers, rising keys (the optimistic max's fallback); one block taking
// every tile; causal tiles in groups of heads; each tile's and block's own descales; and what each
// rung refuses. The quantisation's own cases and bad input: test_gpu_quantize.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <string>
#include <vector>

#include "check.hpp"
#include "test_gpu_util.hpp"

using namespace attention;
using namespace attention::fp8;
using namespace attention::fp8::testing;
using course::Dtype;

namespace {

const bool sanitizer = course::testing::under_sanitizer();

// N(0, 1) inputs whose keys are scaled up block by block in the order the kernels visit them (the last
// block first): key j by 1 + (the 256-key blocks after j's), so that a row's max grows by about 4 log₂
// units a block, past the optimistic max's headroom (3), and its fallback runs in most blocks.
Inputs rising_keys(const Shape& s, Dtype t, std::uint64_t seed) {
  NormalInputs n = normal_inputs(s, t, seed);
  const int blocks = (s.N + 255) / 256;
  for (int h = 0; h < s.heads(); ++h)
    for (int j = 0; j < s.N; ++j)
      for (int c = 0; c < s.d; ++c) n.K[(std::size_t(h) * s.N + j) * s.d + c] *= 1.0f + float(blocks - 1 - j / 256);
  for (float& k : n.K) k = course::round_to(t, k);
  return to_inputs(n, t, seed);
}
// N(0, 1) inputs where one query row in 16 (one a warp) rises and the others stay level: K's first
// column grows by 8 a block in the visiting order, and only those rows' Q has 4 there (the others 0).
// The rising row falls back every block; its warp's level rows must keep their m (a rule that raised
// every row's m at each fallback would push their later blocks below e4m3's range).
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

Inputs normal(const Shape& s, Dtype t, std::uint64_t seed) { return to_inputs(normal_inputs(s, t, seed), t, seed); }

}  // namespace

TEST_CASE("every rung and ablation, every scheme it takes: O and L within twice plain FP8's error of float64") {
  const std::vector<int> Ns = sanitizer ? std::vector<int>{1, 300} : std::vector<int>{1, 77, 129, 300, 1000};
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (std::size_t n = 0; n < Ns.size(); ++n) {
        const Dtype t = n % 2 == 0 ? Dtype::fp16 : Dtype::bf16;  // both dtypes over the Ns
        const Shape s{1, 3, Ns[n], d, causal};
        const std::uint64_t seed = course::fresh_seed();
        Expected e(s, t, make_inputs(s, t, seed), seed);
        CAPTURE(s.text());
        CAPTURE(seed);
        for (const Fp8Variant* v : variants_at(t, d))
          for (const Scheme& scheme : schemes())
            if (v->takes(scheme, d)) check(*v, e, scheme);
      }
}

TEST_CASE("the last rungs: large logits (Q times 20), FA-3's outlier inputs, many heads and N = 4097") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  const std::vector<const Fp8Variant*> last = {&fp8_registry().find("row_sum"), &fp8_registry().find("epilogue"),
                                               &fp8_registry().find("lin")};
  for (int d : {64, 128}) {
    const Shape big{2, 2, 513, d, true}, outliers{1, 2, 1000, d, false};
    Expected large(big, Dtype::bf16, make_inputs(big, Dtype::bf16, seed, 20.0f), seed);
    Expected outlying(outliers, Dtype::fp16,
                      to_inputs(normal_inputs(outliers, Dtype::fp16, seed, 0.001, 10.0), Dtype::fp16, seed), seed);
    for (const Fp8Variant* v : last)
      for (const Scheme& scheme : schemes())
        if (v->supports(Dtype::fp16, d) && v->takes(scheme, d)) {
          check(*v, large, scheme);
          check(*v, outlying, scheme);
        }
  }
  if (!sanitizer) {
    const Shape s{4, 16, 4097, 64, true};
    Expected many(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), seed);
    for (const Fp8Variant* v : last)
      for (const Scheme& scheme : schemes())
        if (v->supports(Dtype::fp16, 64) && v->takes(scheme, 64)) check(*v, many, scheme);
  }
}

TEST_CASE("rung 7 runs P̃ by fp16's bit pattern: its O differs from the exponential unit's in most values") {
  // On the same quantised inputs the lin rule's P̃ differs from ex2's in many keys' e4m3 bytes, so over
  // 1000 keys a row nearly every value of O differs from rung 2's (d = 64) or rung 6's (d = 128) O.
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  for (int d : {64, 128}) {
    const Shape s{1, 2, 1000, d, false};
    const Inputs in = make_inputs(s, Dtype::fp16, seed);
    const Fp8Variant &lin = fp8_registry().find("lin"), &exact = fp8_registry().find(d == 64 ? "row_sum" : "epilogue");
    const Scheme scheme = lin.quantised_by(schemes().front(), d);
    const std::vector<float> O_lin = run(lin, s, Dtype::fp16, in, scheme, seed).O;
    const std::vector<float> O_ex2 = run(exact, s, Dtype::fp16, in, scheme, seed).O;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < O_lin.size(); ++i) differ += O_lin[i] != O_ex2[i];
    MESSAGE("d = " << d << ": " << differ << " of O's " << O_lin.size() << " values differ from " << exact.name << "'s");
    CHECK(differ > O_lin.size() / 2);
  }
}

// Key blocks of 256: ragged N on both sides of a block and of K's two descales in it (N = 300: the last
// block's 44 keys lie in K's third 128-row block, with no fourth; N = 256, 257: a last block of one key),
// causal or not, one row; N(0, 1) fp16, uniform bf16 (V centred by the quantisation), rising keys and one
// rising row (the optimistic max's fallback), large logits and outliers; one block taking every tile.
TEST_CASE("the wide rungs (key blocks of 256): ragged N, rising keys, large logits, one block taking every tile") {
  const std::vector<int> Ns = sanitizer ? std::vector<int>{1, 257, 300} : std::vector<int>{1, 129, 256, 257, 300, 1000, 2049};
  std::vector<const Fp8Variant*> wide;
  for (const Fp8Variant* v : variants_at(Dtype::fp16, 128))
    if (v->wide(128)) wide.push_back(v);
  for (bool causal : {false, true})
    for (int N : Ns) {
      const Shape s{1, 2, N, 128, causal};
      const std::uint64_t seed = course::fresh_seed();
      CAPTURE(s.text());
      CAPTURE(seed);
      Expected level(s, Dtype::fp16, normal(s, Dtype::fp16, seed), seed);
      Expected uniform(s, Dtype::bf16, make_inputs(s, Dtype::bf16, seed), seed);
      std::list<Expected> hard;  // the per-tensor schemes on each
      if (N >= 300) hard.emplace_back(s, Dtype::fp16, rising_keys(s, Dtype::fp16, seed), seed);
      if (N >= 1000) hard.emplace_back(s, Dtype::fp16, one_rising_row(s, Dtype::fp16, seed), seed);
      if (N == 1000) {
        hard.emplace_back(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed, 20.0f), seed);
        hard.emplace_back(s, Dtype::fp16, to_inputs(normal_inputs(s, Dtype::fp16, seed, 0.001, 10.0), Dtype::fp16, seed),
                          seed);
      }
      for (const Fp8Variant* v : wide)
        for (int cap : {0, 1}) {
          CAPTURE(cap);
          const LaunchOptions options{cap, 0};
          check(*v, level, schemes()[0], options);
          if (cap == 0) {
            check(*v, uniform, schemes()[2], options);
            for (Expected& e : hard)
              for (const Scheme& scheme : {schemes()[0], schemes()[2]}) check(*v, e, scheme, options);
          }
        }
    }
}

// With 1 or 3 blocks each block takes many tiles one after another, so every hand-over between tiles
// is exercised: the ring's phases, Q's slot (rung 5 on: its two halves, each with its own phases), v̄'s
// two slots, O's staging (in a P̃ tile from rung 3 on), rung 4's next S issued under the last P̃·V with
// a key block skipped before it where N64 is not a multiple of 128 (N = 300, 700), and the producer's
// slots of each tile's numbers. Then causal tiles in groups of heads (4: the last group of 2; 1: a
// head at a time) for the rungs that take that order.
TEST_CASE("every rung on few blocks: each block takes many tiles, one after another; causal tiles in groups of heads") {
  const std::vector<int> Ns = sanitizer ? std::vector<int>{1, 300} : std::vector<int>{1, 129, 300, 700, 1000};
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int N : Ns) {
        const Shape s{2, 3, N, d, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        Expected level(s, Dtype::bf16, normal(s, Dtype::bf16, seed), seed);
        std::list<Expected> uniform;
        if (N == 700) uniform.emplace_back(s, Dtype::fp16, make_inputs(s, Dtype::fp16, seed), seed);
        for (const Fp8Variant* v : variants_at(Dtype::bf16, d))
          for (int cap : {1, 3}) {
            CAPTURE(cap);
            check(*v, level, schemes()[0], {cap, 0});
            for (Expected& e : uniform) check(*v, e, schemes()[0], {cap, 0});
          }
      }
  const Shape s{2, 3, sanitizer ? 300 : 700, 128, true};
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  Expected level(s, Dtype::bf16, normal(s, Dtype::bf16, seed), seed);
  for (const char* rung : {"tile_overlap", "tile_start", "epilogue", "lin"})
    for (int group : {4, 1})
      for (int cap : {1, 3}) {
        CAPTURE(rung);
        CAPTURE(group);
        CAPTURE(cap);
        check(fp8_registry().find(rung), level, schemes()[0], {cap, group});
      }
}

// Per tensor, every tile, warpgroup and key block has the same descales, so a wide kernel that took one
// from the wrong tile, warpgroup or key block would pass the cases above. Here Q's and K's per-tensor
// bytes are kept and each block of 128 rows has its descale multiplied by 2^e, e from -2 to 2 and never
// the same in neighbouring blocks; V's, which the wide kernels take per head, by 2^e a head (and v̄ with
// it). The inputs' rows are multiplied alike, so the bytes stand for the scaled inputs as they did for
// the inputs. At N = 300 and 2049 the two warpgroups of a tile read different Q blocks, and a warpgroup
// that skips the tile's last key block starts on the descales of the one before it; one block taking
// every tile checks the descales loaded a tile ahead.
TEST_CASE("the wide rungs take each tile's, warpgroup's and key block's own descales") {
  for (const Fp8Variant* v : variants_at(Dtype::fp16, 128)) {
    if (!v->wide(128)) continue;
    for (int cap : {0, 1})
      for (bool causal : {true, false})
        for (int N : sanitizer ? std::vector<int>{300} : std::vector<int>{300, 1000, 2049}) {
          const Shape s{1, 2, N, 128, causal};
          const std::uint64_t seed = course::fresh_seed();
          CAPTURE(s.text());
          CAPTURE(cap);
          CAPTURE(seed);
          // `in` is scaled by the hook below, after the quantisation read it and before check() builds
          // the float64 reference from it.
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
          check(*v, s, Dtype::fp16, in, schemes()[0], seed, {cap, 0}, rescale);
        }
  }
}

// Why rungs 1 and 2 keep a fresh accumulator a key block and the wide rungs need V centred: on inputs of
// mean 0.5, a sum over all N keys in the FP8 tensor cores' accumulator loses a little of each (positive)
// term (chapter 09: O 3.5 % low at N = 4096 with O on the tensor cores and V as it is). The signed mean
// error of O on 64 rows, against float64: within ±0.5 % for rung 2 with V as it is or centred, and for
// the wide rungs with V centred; the wide rungs refuse V as it is.
TEST_CASE("on inputs of mean 0.5 at N = 4096: no drift with a fresh accumulator or V centred; the wide rungs refuse V as it is") {
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
    const double fresh = bias(run(fp8_registry().find("row_sum"), s, Dtype::fp16, in, scheme, seed));
    MESSAGE(scheme.name() << ", row_sum (a fresh accumulator a block): signed mean error of O " << fresh);
    CHECK(std::fabs(fresh) < 0.005);
  }
  for (const Fp8Variant* v : variants_at(Dtype::fp16, 128)) {
    if (!v->wide(128)) continue;
    CAPTURE(v->name);
    CHECK_THROWS_WITH_AS(run(*v, s, Dtype::fp16, in, schemes().front(), seed), doctest::Contains("needs V centred"),
                         course::UsageError);
    const double drift = bias(run(*v, s, Dtype::fp16, in, centred(schemes().front()), seed));
    MESSAGE(v->name << ", V centred: signed mean error of O " << drift);
    CHECK(std::fabs(drift) < 0.005);
  }
}

TEST_CASE("what the rungs refuse: per-block V and d = 64 for key blocks of 256, fp32 outputs, d = 32, empty shapes") {
  const Shape s{1, 1, 129, 128, false};
  const Inputs in = make_inputs(s, Dtype::fp16, 1);
  for (const Fp8Variant* v : variants_at(Dtype::fp16, 128)) {
    CAPTURE(v->name);
    if (v->wide(128)) {
      CHECK_THROWS_WITH_AS(run(*v, s, Dtype::fp16, in, centred(schemes()[1]), 1),
                           doctest::Contains("need V's descale per tensor"), course::UsageError);  // per block
      if (!v->supports(Dtype::fp16, 64)) {
        const Shape s64{1, 1, 129, 64, false};
        CHECK_THROWS_WITH_AS(run(*v, s64, Dtype::fp16, make_inputs(s64, Dtype::fp16, 1), centred(schemes()[0]), 1),
                             doctest::Contains("run at d = 128 only"), course::UsageError);
      }
    }
    course::DeviceBuffer<std::uint16_t> O(s.elements());
    course::DeviceBuffer<float> L(s.N);
    Fp8Buffers q(s);
    const DeviceFp8 in8 = q.view(centred(schemes()[0]));
    CHECK_THROWS_WITH_AS(v->launch(s, Dtype::fp32, in8, O.get(), L.get(), {}), doctest::Contains("writes O in fp16 or bf16"),
                         course::UsageError);
    const Shape s32{1, 1, 129, 32, false}, empty{1, 1, 0, 128, false};
    CHECK_THROWS_WITH_AS(v->launch(s32, Dtype::fp16, in8, O.get(), L.get(), {}), doctest::Contains("runs d = 64 or 128"),
                         course::UsageError);
    CHECK_THROWS_WITH_AS(v->launch(empty, Dtype::fp16, in8, O.get(), L.get(), {}), doctest::Contains("at least 1"),
                         course::UsageError);
    CHECK_THROWS_WITH_AS(v->launch(s, Dtype::fp16, in8, O.get(), L.get(), {-1, 0}), doctest::Contains("grid cap"),
                         course::UsageError);
    CHECK_THROWS_WITH_AS(v->launch(s, Dtype::fp16, in8, O.get(), L.get(), {0, -1}), doctest::Contains("head group"),
                         course::UsageError);
  }
}
