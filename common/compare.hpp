// Comparison of a result with its float64 reference.
//
// The error of one element is |out - ref| / max(|ref|, rms(ref)): relative to the element itself,
// but measured against the typical magnitude where the reference is close to zero. NaN or inf in
// `out` where the reference is finite is an infinite error: NaN never passes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace course {

// How one element's error is scaled. element: |out - ref| / max(|ref|, rms(ref)), the course's
// measure (above). rms: |out - ref| / rms(ref), so that the largest error is max |out - ref| over
// the array in units of its rms: the measure of FlashAttention's own tests (max absolute error),
// which stage 07 holds its fp16/bf16 gradients to.
enum class Scale { element, rms };

struct Comparison {
  double max_rel_err = 0.0;
  double tolerance = 0.0;
  std::size_t checked = 0;
  std::size_t bad = 0;         // elements whose error exceeds the tolerance
  std::string first_mismatches;  // the first few bad elements, for the message
  Scale scale = Scale::element;
  bool ok() const { return checked > 0 && bad == 0; }
  std::string summary() const;  // one line: "ok, max rel err 1.2e-06 (tol 1.0e-05, 4096 checked)"
};

// out[i] against ref[i] for i < n. `where[i]`, if given, is the flat index of element i in a
// matrix of `cols` columns (used to print "[row,col]"); otherwise i itself is.
Comparison compare(const float* out, const double* ref, std::size_t n, double tolerance,
                   std::size_t cols = 0, const std::vector<std::size_t>* where = nullptr,
                   Scale scale = Scale::element);

// compare()'s max_rel_err for a result held in doubles, by the same code (one definition: the rms
// over the finite reference elements, NaN or inf in `out` an infinite error where the reference is
// finite, a NaN reference wants a NaN and an inf reference the same inf). Used where a result is
// itself a float64 computation, e.g. "attention computed plainly in fp16", whose error sets a
// kernel's tolerance: the two must be the same measure. out and ref of one size, else
// std::invalid_argument.
double max_rel_error(const std::vector<double>& out, const std::vector<double>& ref,
                     Scale scale = Scale::element);

// Tolerance for a float32 result that sums `terms` rounded products (a dot product, a row sum):
// rounding errors grow about as sqrt(terms) * 2^-24; we allow 4x that and never less than 1e-6.
double fp32_sum_tolerance(std::size_t terms);

}  // namespace course
