#include "check.hpp"

#include <cstdio>
#include <exception>
#include <new>
#include <sstream>

namespace course {

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

int run_program(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  } catch (const ResourceError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of host memory; try a smaller problem\n", program.c_str());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  }
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", bytes, units[u]);
  return text;
}

#if COURSE_HAS_CUDA
void check_cuda(cudaError_t status, const char* expression, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::ostringstream message;
  message << "CUDA error " << cudaGetErrorName(status) << " (" << cudaGetErrorString(status)
          << ") in " << expression << " at " << file << ":" << line;
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // allocation failures are not sticky: clear it and report a resource error
    throw ResourceError(message.str());
  }
  throw std::runtime_error(message.str());
}
#endif

}  // namespace course
