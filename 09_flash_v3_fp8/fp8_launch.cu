#include "fp8_launch.cuh"

#include <string>

namespace attention::fp8 {

void require_problem(const Shape& s, course::Dtype out) {
  require_supported(s);
  course::require(out == course::Dtype::fp16 || out == course::Dtype::bf16,
                  std::string("FP8 attention writes O in fp16 or bf16, not ") + course::name(out));
  course::require(s.d == 64 || s.d == 128, "stage 09 runs d = 64 or 128, not d = " + std::to_string(s.d));
}

Launch prepare(const char* rung, const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
               const LaunchOptions& options, int Br, int Bc, int q_box) {
  require_problem(s, out);
  fa3::require_hopper("fp8");
  course::require(in.v_mean != nullptr, "fp8 attention: v_mean (the quantisation's v̄) is needed");
  if (Bc == kBcWide) {
    course::require(s.d == 128, std::string("fp8 ") + rung + ": key blocks of 256 run at d = 128 only");
    // l sums on the tensor cores with o, whose unit would step with a per-block descale of V.
    course::require(in.scheme.granularity == Granularity::tensor,
                    std::string("fp8 ") + rung + ": key blocks of 256 need V's descale per tensor (l sums on the "
                    "tensor cores with o); quantise per_tensor or per_tensor_hadamard, not " + in.scheme.name());
    // O accumulates on the tensor cores over all N keys, which drifts unless V's columns have mean 0.
    course::require(in.scheme.centre_v, std::string("fp8 ") + rung + ": O on the tensor cores needs V centred "
                    "(the scheme's _centred form), not " + in.scheme.name());
  }
  const int Np = padded_keys(s.N);
  const CUtensorMapSwizzle qk_swizzle = s.d == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  Launch l{};
  l.Q = fa3::make_tensor_map({in.Q, u8, 1, s.d, s.N, s.heads(), s.d, q_box, qk_swizzle});
  l.K = fa3::make_tensor_map({in.K, u8, 1, s.d, s.N, s.heads(), s.d, Bc, qk_swizzle});
  l.Vt = fa3::make_tensor_map({in.Vt, u8, 1, Np, s.d, s.heads(), kBc, s.d, CU_TENSOR_MAP_SWIZZLE_128B});
  l.O = fa3::make_tensor_map(O, out == course::Dtype::bf16, s.heads(), s.N, s.d, 16);
  l.sc = {in.q_scale, in.k_scale, in.v_scale, (s.N + kScaleRows - 1) / kScaleRows, in.v_mean};
  l.p = tc::params(nullptr, nullptr, nullptr, O, L, s.N, s.causal, s.d);
  course::require(options.head_group >= 0, "fp8: the head group is a count of heads (0: chosen by the size)");
  l.grid = fa3::persistent_grid(s, "fp8", Br, options.grid_cap);
  l.next_tile = fa3::tile_counter();
  l.heads = s.heads();
  return l;
}

}  // namespace attention::fp8
