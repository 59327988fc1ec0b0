// CPU tests of common/: the comparison, the counting view, the CSV format.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#if COURSE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench.hpp"
#include "check.hpp"
#include "compare.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "io_count.hpp"
#include "kernel_time.hpp"
#include "options.hpp"
#include "report.hpp"

using namespace course;

TEST_CASE("compare: passes within tolerance, fails outside, NaN never passes") {
  const std::vector<double> ref = {1.0, -2.0, 3.0, 0.0};
  std::vector<float> out = {1.0f, -2.0f, 3.0f, 0.0f};
  CHECK(compare(out.data(), ref.data(), 4, 1e-6).ok());

  out[2] = 3.0f * (1.0f + 1e-3f);
  const auto bad = compare(out.data(), ref.data(), 4, 1e-5, 2);
  CHECK_FALSE(bad.ok());
  CHECK(bad.bad == 1);
  CHECK(bad.max_rel_err == doctest::Approx(1e-3).epsilon(1e-3));
  CHECK(bad.first_mismatches.find("[1,0]") != std::string::npos);  // row 1, col 0 of 2 columns

  out[2] = std::nanf("");
  CHECK_FALSE(compare(out.data(), ref.data(), 4, 1.0).ok());
  out[2] = INFINITY;
  CHECK_FALSE(compare(out.data(), ref.data(), 4, 1.0).ok());
}

TEST_CASE("compare: a zero reference element is measured against the rms, NaN references must propagate") {
  const std::vector<double> ref = {0.0, 4.0, -4.0};
  std::vector<float> out = {1e-7f, 4.0f, -4.0f};
  CHECK(compare(out.data(), ref.data(), 3, 1e-6).ok());  // 1e-7 / rms(3.27) < 1e-6
  const std::vector<double> nan_ref = {NAN, 1.0};
  std::vector<float> nan_out = {std::nanf(""), 1.0f};
  CHECK(compare(nan_out.data(), nan_ref.data(), 2, 1e-6).ok());
  nan_out[0] = 0.0f;
  CHECK_FALSE(compare(nan_out.data(), nan_ref.data(), 2, 1e-6).ok());
}

TEST_CASE("compare, Scale::rms: every error in units of the rms (max |out - ref|), NaN never passes") {
  const std::vector<double> ref = {3.0, -4.0, 0.0, 0.0};  // rms 2.5
  std::vector<float> out = {3.03f, -4.0f, 0.0f, 0.0f};     // per element: 1e-2; against the rms: 1.2e-2
  CHECK(compare(out.data(), ref.data(), 4, 1.1e-2).ok());
  const auto by_rms = compare(out.data(), ref.data(), 4, 1.1e-2, 0, nullptr, Scale::rms);
  CHECK_FALSE(by_rms.ok());
  CHECK(by_rms.max_rel_err == doctest::Approx(0.03 / 2.5).epsilon(1e-4));
  CHECK(by_rms.summary().find("err/rms") != std::string::npos);
  const std::vector<double> out64(out.begin(), out.end());
  CHECK(max_rel_error(out64, ref, Scale::rms) == doctest::Approx(by_rms.max_rel_err).epsilon(1e-6));
  CHECK(max_rel_error(out64, ref) == doctest::Approx(0.01).epsilon(1e-4));
  out[2] = std::nanf("");
  CHECK_FALSE(compare(out.data(), ref.data(), 4, 1.0, 0, nullptr, Scale::rms).ok());
}

TEST_CASE("max_rel_error is compare's max_rel_err, for results in doubles: NaN, inf and the rms alike") {
  // One reference with a NaN and an inf: the rms is over the finite elements only (3 and 4: 3.54).
  const std::vector<double> ref = {3.0, -4.0, NAN, INFINITY};
  const auto both = [&](std::vector<float> out, Scale scale) {
    const std::vector<double> out64(out.begin(), out.end());
    const double by_compare = compare(out.data(), ref.data(), ref.size(), 1.0, 0, nullptr, scale).max_rel_err;
    CHECK(max_rel_error(out64, ref, scale) == by_compare);
    return by_compare;
  };
  for (Scale scale : {Scale::element, Scale::rms}) {
    CAPTURE(int(scale));
    CHECK(both({3.0f, -4.0f, std::nanf(""), INFINITY}, scale) == 0.0);         // NaN for NaN, inf for inf
    CHECK(both({3.0f, -4.0f, 1.0f, INFINITY}, scale) == INFINITY);             // a NaN reference wants a NaN
    CHECK(both({3.0f, -4.0f, std::nanf(""), 1e30f}, scale) == INFINITY);       // an inf reference wants inf
    CHECK(both({3.0f, -4.0f, std::nanf(""), -INFINITY}, scale) == INFINITY);
    CHECK(both({3.0f, std::nanf(""), std::nanf(""), INFINITY}, scale) == INFINITY);  // NaN never passes
  }
  const double rms = std::sqrt(12.5);
  CHECK(both({3.0f, -4.5f, std::nanf(""), INFINITY}, Scale::rms) == doctest::Approx(0.5 / rms));
  CHECK(both({3.0f, -4.5f, std::nanf(""), INFINITY}, Scale::element) == doctest::Approx(0.5 / 4.0));
  CHECK(both({3.25f, -4.0f, std::nanf(""), INFINITY}, Scale::element) == doctest::Approx(0.25 / rms));  // 3 < rms
  CHECK_THROWS_AS(max_rel_error({1.0}, {1.0, 2.0}), std::invalid_argument);
}

TEST_CASE("compare: an empty comparison is not a pass") {
  CHECK_FALSE(compare(nullptr, nullptr, 0, 1.0).ok());
}

TEST_CASE("fp32_sum_tolerance grows as sqrt(terms), floor 1e-6") {
  CHECK(fp32_sum_tolerance(1) == doctest::Approx(1e-6));
  CHECK(fp32_sum_tolerance(4096) == doctest::Approx(4.0 * 64.0 * std::ldexp(1.0, -24)));
  CHECK(fp32_sum_tolerance(16384) > fp32_sum_tolerance(4096));
}

TEST_CASE("random inputs: reproducible from the seed, not constant, not zero-mean") {
  const auto a = random_uniform(10000, 42);
  const auto b = random_uniform(10000, 42);
  const auto c = random_uniform(10000, 43);
  CHECK(a == b);
  CHECK(a != c);
  const double mean = std::accumulate(a.begin(), a.end(), 0.0) / double(a.size());
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  CHECK(*std::min_element(a.begin(), a.end()) < 0.0f);
  CHECK(*std::max_element(a.begin(), a.end()) > 1.0f);
}

TEST_CASE("COURSE_SEED: every 64-bit seed fresh_seed prints repeats, 20 digits included; others refused") {
  struct Restore {  // COURSE_SEED as it was, also when a check throws
    std::string was;
    bool had;
    Restore() : had(std::getenv("COURSE_SEED") != nullptr) { if (had) was = std::getenv("COURSE_SEED"); }
    ~Restore() { had ? setenv("COURSE_SEED", was.c_str(), 1) : unsetenv("COURSE_SEED"); }
  } restore;
  setenv("COURSE_SEED", "15241988710812358943", 1);  // 20 digits (a stage 09 GPU test printed it)
  CHECK(fresh_seed() == 15241988710812358943ull);
  setenv("COURSE_SEED", "18446744073709551615", 1);  // 2^64 - 1
  CHECK(fresh_seed() == 18446744073709551615ull);
  setenv("COURSE_SEED", "0", 1);
  CHECK(fresh_seed() == 0);
  for (const char* bad : {"18446744073709551616", "99999999999999999999", "123456789012345678901", "-1", "", "1e5"}) {
    CAPTURE(bad);
    setenv("COURSE_SEED", bad, 1);
    CHECK_THROWS_AS(fresh_seed(), UsageError);
  }
}

TEST_CASE("counting view: a contiguous request costs the sectors it touches") {
  std::vector<float> data(1100);  // the view sees the first 1000
  std::iota(data.begin(), data.end(), 0.0f);
  Hbm hbm;
  auto A = hbm.wrap(data.data(), 1000);
  std::vector<float> out(100);
  A.load(0, 8, out.data());  // 32 bytes, aligned: one sector
  CHECK(hbm.count().read_bytes == 32);
  A.load(4, 8, out.data());  // 32 bytes straddling two sectors
  CHECK(hbm.count().read_bytes == 32 + 64);
  A.load(0, 1, out.data());  // a single float still costs a sector
  CHECK(hbm.count().read_bytes == 32 + 64 + 32);
  CHECK(out[0] == 0.0f);
  A.store(16, 32, out.data());  // 128 aligned bytes: four sectors
  CHECK(hbm.count().write_bytes == 128);
  CHECK_THROWS_AS(A.load(990, 20, out.data()), std::out_of_range);
}

TEST_CASE("counting view: a warp's lanes share sectors, as the coalescer merges them") {
  std::vector<float> data(32 * 64);
  Hbm hbm;
  auto A = hbm.wrap(data.data(), data.size());
  std::size_t index[32];
  float values[32];
  for (int l = 0; l < 32; ++l) index[l] = l;  // 32 consecutive floats: 4 sectors
  A.warp_load(index, 32, values);
  CHECK(hbm.count().read_bytes == 4 * 32);
  for (int l = 0; l < 32; ++l) index[l] = 7;  // a broadcast: 1 sector
  A.warp_load(index, 32, values);
  CHECK(hbm.count().read_bytes == 5 * 32);
  for (int l = 0; l < 32; ++l) index[l] = std::size_t(l) * 64;  // a column: 32 sectors
  A.warp_load(index, 32, values);
  CHECK(hbm.count().read_bytes == 37 * 32);
  for (int l = 0; l < 32; ++l) index[l] = std::size_t(31 - l);  // order does not matter
  A.warp_load(index, 32, values);
  CHECK(hbm.count().read_bytes == 41 * 32);
}

TEST_CASE("counting view: arrays are placed 256-byte aligned, like cudaMalloc") {
  std::vector<float> a(3), b(5);
  Hbm hbm;
  auto A = hbm.wrap(a.data(), a.size());
  auto B = hbm.wrap(b.data(), b.size());
  float out[8];
  A.load(0, 3, out);
  B.load(0, 5, out);  // would straddle if B started right after A's 12 bytes
  CHECK(hbm.count().read_bytes == 64);
}

TEST_CASE("report: CSV rows follow the schema; unknown values stay empty, never zero") {
  Row row;
  row.stage = "01_naive_matmul";
  row.variant = "coalesced";
  row.device = "cpu";
  row.dtype = "fp32";
  row.shape = "M=2 N=3 K=4";
  row.size = 2;
  row.flops = 48;
  row.io_model_bytes = 1024;
  const std::string line = csv_line(row);
  CHECK(line == "01_naive_matmul,coalesced,cpu,fp32,M=2 N=3 K=4,2,48,,,,1024,,,,,,,,,,,,");
  CHECK(std::count(line.begin(), line.end(), ',') + 1 == long(csv_columns().size()));
  row.variant = "a,b";
  CHECK(csv_line(row).rfind("01_naive_matmul,\"a,b\",", 0) == 0);

  row.ms = 2.0;
  row.derive_rates();
  CHECK(*row.tflops == doctest::Approx(48.0 / 2e9));
  CHECK(*row.gbps == doctest::Approx(1024.0 / 2e6));

  // The columns added later sit at the end, so that the first 18 are where they always were.
  const auto& columns = csv_columns();
  REQUIRE(columns.size() == 23);
  CHECK(columns[17] == "max_rel_err");
  CHECK(std::vector<std::string>(columns.begin() + 18, columns.end()) ==
        std::vector<std::string>{"ms_min", "ms_max", "kernel_ms", "kernels", "round"});
  row.variant = "v";
  row.ms_min = 1.5, row.ms_max = 2.5, row.kernel_ms = 1.9, row.kernels = 2, row.round = 3;
  CHECK(csv_line(row).substr(csv_line(row).size() - 16) == ",1.5,2.5,1.9,2,3");
}

TEST_CASE("report: append_csv writes the header once and refuses a file with another header") {
  const std::string path = "test_common_report.csv";
  std::remove(path.c_str());
  Row row;
  row.stage = "s";
  append_csv(path, {row});
  append_csv(path, {row, row});
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  std::getline(in, line);
  CHECK(line == csv_header());
  while (std::getline(in, line)) ++lines;
  CHECK(lines == 3);
  {
    std::ofstream other(path);
    other << "a,b\n";
  }
  CHECK_THROWS_AS(append_csv(path, {row}), UsageError);
  std::remove(path.c_str());
}

TEST_CASE("--seed: a whole number from 0 to 2^64 - 1; a negative one is refused (exit 2), not wrapped") {
  auto parse = [](std::vector<std::string> args) {
    CLI::App app{"t"};
    CommonOptions options;
    add_common_options(app, options);
    std::vector<char*> argv = {const_cast<char*>("t")};
    for (auto& a : args) argv.push_back(a.data());
    const int code = parse_options(app, int(argv.size()), argv.data());
    return std::make_pair(code, options.seed);
  };
  CHECK(parse({"--seed", "0"}) == std::make_pair(-1, std::uint64_t(0)));
  CHECK(parse({"--seed", "18446744073709551615"}) == std::make_pair(-1, UINT64_MAX));
  for (const char* bad : {"-1", "18446744073709551616", "1e3", "x", "+5", ""}) {
    CAPTURE(bad);
    CHECK(parse({"--seed", bad}).first == 2);
  }
}

TEST_CASE("--rounds, --between-rounds and --kernel-time") {
  CLI::App app{"t"};
  CommonOptions options;
  add_common_options(app, options);
  std::vector<std::string> args = {"t", "--rounds", "5", "--between-rounds", "scripts/peers/peer_turn.sh /tmp/x",
                                   "--kernel-time"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  CHECK(parse_options(app, int(argv.size()), argv.data()) == -1);
  CHECK(options.rounds == 5);
  CHECK(options.between_rounds == "scripts/peers/peer_turn.sh /tmp/x");
  CHECK(options.kernel_time);
  CLI::App again{"t"};
  CommonOptions defaults;
  add_common_options(again, defaults);
  std::vector<std::string> bad = {"t", "--rounds", "0"};
  std::vector<char*> bad_argv;
  for (auto& a : bad) bad_argv.push_back(a.data());
  CHECK(parse_options(again, int(bad_argv.size()), bad_argv.data()) == 2);
  CHECK(defaults.rounds == 1);
  CHECK(defaults.between_rounds.empty());
  CHECK(!defaults.kernel_time);
}

TEST_CASE("--between-rounds: the command sees the problem and the round; a failure is said") {
  Row row;
  row.stage = "08_flash_v3";
  row.variant = "tuned";
  row.dtype = "bf16";
  row.shape = "B=4 H=16 N=4096 d=128 causal=1 Br=128 Bc=128";
  CHECK(run_between_rounds("test \"$COURSE_STAGE $COURSE_VARIANT $COURSE_DTYPE $COURSE_ROUND\" = "
                           "\"08_flash_v3 tuned bf16 3\" && test \"$COURSE_SHAPE\" = "
                           "\"B=4 H=16 N=4096 d=128 causal=1 Br=128 Bc=128\"",
                           row, 3) == "");
  CHECK(run_between_rounds("exit 7", row, 1) == "exit status 7");
  CHECK(run_between_rounds("kill -9 $$", row, 1) == "killed by signal 9");
}

TEST_CASE("kernel time: the GPU work split into calls at the L2 flushes, summed, the median") {
  // flush, [memset, kernel], flush, [memset, kernel], flush, [memset, kernel]; a piece before the
  // first flush belongs to no call. Out of order on purpose: the split sorts by start.
  std::vector<GpuOp> ops = {
      {"before", 0, 5, false},          {"flash_v3_tuned", 120, 220, false}, {"read_all", 10, 60, true},
      {"memset", 100, 102, false},      {"read_all", 300, 350, true},        {"memset", 360, 362, false},
      {"flash_v3_tuned", 370, 490, false}, {"read_all", 500, 550, true},    {"memset", 560, 562, false},
      {"flash_v3_tuned", 570, 680, false}};
  const auto calls = split_calls(ops);
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].size() == 2);
  CHECK(calls[0][0].name == "memset");
  std::string why;
  const auto t = kernel_time_of(calls, 3, why);
  REQUIRE(t);
  CHECK(t->ops == 2);
  CHECK(t->median_ms == doctest::Approx(112e-6));  // 102, 122, 112 ns
  CHECK(t->min_ms == doctest::Approx(102e-6));
  CHECK(t->max_ms == doctest::Approx(122e-6));
  CHECK(t->names == std::vector<std::string>{"memset", "flash_v3_tuned"});
  CHECK(!kernel_time_of(calls, 4, why));
  CHECK(why.find("expected 4") != std::string::npos);
  // Two flush pieces in a row are one flush; a call with one piece fewer makes the count vary.
  ops = {{"flush_a", 0, 1, true}, {"flush_b", 1, 2, true}, {"k", 3, 4, false}, {"x", 4, 5, false},
         {"flush_a", 6, 7, true}, {"flush_b", 7, 8, true}, {"k", 9, 11, false}};
  const auto varied = kernel_time_of(split_calls(ops), 2, why);
  REQUIRE(varied);
  CHECK(varied->ops == -1);
  CHECK(!kernel_time_of(split_calls({{"k", 0, 1, false}}), 1, why));  // no flush: no call
  // The flush recognised as its sequence of pieces: a call's own memset is not taken for it.
  ops = {{"memset", 0, 1, false}, {"read_all", 1, 2, false}, {"memset", 3, 4, false}, {"k", 4, 6, false},
         {"memset", 7, 8, false}, {"read_all", 8, 9, false}, {"memset", 10, 11, false}, {"k", 11, 14, false}};
  mark_flush(ops, {"memset", "read_all"});
  CHECK(ops[0].flush);
  CHECK(ops[1].flush);
  CHECK(!ops[2].flush);
  const auto sequence = kernel_time_of(split_calls(ops), 2, why);
  REQUIRE(sequence);
  CHECK(sequence->ops == 2);
  CHECK(sequence->median_ms == doctest::Approx(3.5e-6));
  CHECK(short_kernel_name("void attention::fa3::flash_v3_tuned<__half, 128, 2>(CUtensorMap, int)") ==
        "flash_v3_tuned");
  CHECK(short_kernel_name("course::(anonymous namespace)::read_all(int4 const*, unsigned long, int*, int)") ==
        "read_all");
  CHECK(short_kernel_name("cudnn_generated_fort_native_sdpa_sm90_kernel0_0") ==
        "cudnn_generated_fort_native_sdpa_sm90_kernel0_0");
  CHECK(short_kernel_name("Memset (Device)") == "Memset");
  CHECK(short_kernel_name("memset") == "memset");
}

TEST_CASE("run_program maps failures to exit codes") {
  CHECK(run_program("t", [] { return 0; }) == 0);
  CHECK(run_program("t", []() -> int { throw UsageError("bad size"); }) == 2);
  CHECK(run_program("t", []() -> int { throw ResourceError("too big"); }) == 3);
  CHECK(run_program("t", []() -> int { throw std::runtime_error("bug"); }) == 1);
}

TEST_CASE("dtype: fp16 and bf16 round to nearest even, with overflow, subnormals and NaN") {
  using course::Dtype;
  CHECK(float_to_bits(Dtype::fp16, 1.0f) == 0x3C00);
  CHECK(float_to_bits(Dtype::fp16, -2.0f) == 0xC000);
  CHECK(float_to_bits(Dtype::fp16, 65504.0f) == 0x7BFF);       // the largest finite
  CHECK(float_to_bits(Dtype::fp16, 65519.0f) == 0x7BFF);       // below half an ulp more
  CHECK(float_to_bits(Dtype::fp16, 65520.0f) == 0x7C00);       // the tie rounds to even: inf
  CHECK(float_to_bits(Dtype::fp16, std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_bits(Dtype::fp16, std::ldexp(1.0f, -26)) == 0x0000);  // below half of it
  CHECK(float_to_bits(Dtype::fp16, 1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie, even stays
  CHECK(float_to_bits(Dtype::fp16, 1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie, odd goes up
  CHECK(std::isnan(bits_to_float(Dtype::fp16, float_to_bits(Dtype::fp16, std::nanf("")))));
  CHECK(float_to_bits(Dtype::bf16, 1.0f) == 0x3F80);
  CHECK(float_to_bits(Dtype::bf16, 1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie, even stays
  CHECK(float_to_bits(Dtype::bf16, 1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(std::isinf(round_to(Dtype::bf16, 3.4e38f)));
  CHECK(std::isnan(round_to(Dtype::bf16, std::nanf(""))));
  // Every fp16 value survives the round trip; rounding is within half an ulp.
  for (unsigned h = 0; h < 0x7C00; ++h) {
    const float x = bits_to_float(Dtype::fp16, std::uint16_t(h));
    REQUIRE(float_to_bits(Dtype::fp16, x) == h);
  }
  const auto values = random_uniform(10000, 7, -100.0f, 100.0f);
  for (float x : values) {
    CHECK(std::abs(round_to(Dtype::fp16, x) - x) <= std::abs(x) * unit_roundoff(Dtype::fp16));
    CHECK(std::abs(round_to(Dtype::bf16, x) - x) <= std::abs(x) * unit_roundoff(Dtype::bf16));
  }
  CHECK(round_to(Dtype::fp32, 0.1f) == 0.1f);
  CHECK(std::string(name(parse_dtype("bf16"))) == "bf16");
  CHECK(bytes_of(Dtype::fp16) == 2);
}

TEST_CASE("without a GPU, the reason is said plainly: no driver is not an old driver") {
  if (!gpu().available) {
    INFO(gpu().why_not);
    CHECK(!gpu().why_not.empty());
    CHECK(gpu().why_not.find("cudaError") == std::string::npos);  // the runtime's names are for bugs
  }
#if COURSE_HAS_CUDA
  const int insufficient_driver = cudaErrorInsufficientDriver, no_device = cudaErrorNoDevice, success = cudaSuccess;
  CHECK(why_no_gpu(insufficient_driver, 0, 0, 13000) == "no NVIDIA GPU or driver found");
  CHECK(why_no_gpu(no_device, 0, 12080, 13000) == "no NVIDIA GPU or driver found");
  CHECK(why_no_gpu(success, 0, 12080, 13000) == "no NVIDIA GPU or driver found");
  const std::string old_driver = why_no_gpu(insufficient_driver, 0, 12020, 13000);
  CHECK(old_driver.find("12.2") != std::string::npos);
  CHECK(old_driver.find("13.0") != std::string::npos);
  CHECK(old_driver.find("update the driver") != std::string::npos);
#endif
}
