// Error handling shared by every stage.
//
// Three kinds of failure, three exit codes (see run_program):
//   UsageError     bad input from the user (sizes <= 0, malformed options): exit 2
//   ResourceError  the problem does not fit (GPU or host memory): exit 3
//   anything else  a bug or a CUDA/CUPTI failure: exit 1
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace course {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ResourceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UsageError(message) unless `ok`.
void require(bool ok, const std::string& message);

// Runs `body` and turns exceptions into a clear message on stderr and a non-zero exit code.
int run_program(const std::string& program, const std::function<int()>& body);

// "1.50 GiB": for messages about memory.
std::string human_bytes(double bytes);

}  // namespace course

#if COURSE_HAS_CUDA
#include <cuda_runtime_api.h>

namespace course {
// Throws with the expression, file and line when `status` is not cudaSuccess. An allocation
// failure becomes a ResourceError.
void check_cuda(cudaError_t status, const char* expression, const char* file, int line);
}  // namespace course

// Every CUDA runtime call goes through CUDA_CHECK.
#define CUDA_CHECK(expression) ::course::check_cuda((expression), #expression, __FILE__, __LINE__)
// After every kernel launch: reports a bad launch configuration at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
#endif

// COURSE_GPU(f): the GPU launcher f in a CUDA build, an empty function in a CPU-only build, so a
// stage's list of variants reads the same in both.
#if COURSE_HAS_CUDA
#define COURSE_GPU(f) (f)
#else
#define COURSE_GPU(f) nullptr
#endif
