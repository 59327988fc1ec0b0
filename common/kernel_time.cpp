#include "kernel_time.hpp"

#include <algorithm>
#include <cstdio>

#include "gpu.hpp"

#if COURSE_HAS_CUPTI
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cupti_version.h>
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "check.hpp"
#include "timer.hpp"
#endif

namespace course {

void mark_flush(std::vector<GpuOp>& ops, const std::vector<std::string>& flush_names) {
  const size_t n = flush_names.size();
  for (size_t i = 0; n > 0 && i + n <= ops.size();) {
    bool match = true;
    for (size_t k = 0; k < n && match; ++k) match = ops[i + k].name == flush_names[k];
    if (match) {
      for (size_t k = 0; k < n; ++k) ops[i + k].flush = true;
      i += n;
    } else {
      ++i;
    }
  }
}

std::vector<std::vector<GpuOp>> split_calls(std::vector<GpuOp> ops) {
  std::stable_sort(ops.begin(), ops.end(), [](const GpuOp& a, const GpuOp& b) { return a.start_ns < b.start_ns; });
  std::vector<std::vector<GpuOp>> calls;
  bool in_call = false, previous_flush = false;
  for (auto& op : ops) {
    if (op.flush) {
      if (!previous_flush) calls.emplace_back();  // a flush (one or more pieces) opens a call
      in_call = true;
    } else if (in_call) {
      calls.back().push_back(std::move(op));
    }
    previous_flush = op.flush;
  }
  return calls;
}

std::optional<KernelTime> kernel_time_of(const std::vector<std::vector<GpuOp>>& calls, int expected,
                                         std::string& why_not) {
  if (int(calls.size()) != expected || calls.empty()) {
    why_not = "found " + std::to_string(calls.size()) + " calls between the L2 flushes, expected " +
              std::to_string(expected);
    return std::nullopt;
  }
  KernelTime t;
  std::vector<double> ms;
  t.ops = int(calls.front().size());
  for (const auto& call : calls) {
    double ns = 0.0;
    for (const auto& op : call) ns += op.end_ns - op.start_ns;
    ms.push_back(ns * 1e-6);
    if (int(call.size()) != t.ops) t.ops = -1;
  }
  if (t.ops == 0) {
    why_not = "no GPU work recorded between the L2 flushes";
    return std::nullopt;
  }
  for (const auto& op : calls.front()) t.names.push_back(op.name);
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.calls = int(n);
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

std::string short_kernel_name(const std::string& name) {
  std::string s = name;
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  const std::string anonymous = "(anonymous namespace)::";
  for (size_t at; (at = s.find(anonymous)) != std::string::npos;) s.erase(at, anonymous.size());
  // Cut at the parameters or the template arguments, whichever comes first.
  const size_t cut = s.find_first_of("(<");
  if (cut != std::string::npos) s = s.substr(0, cut);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return s.empty() ? name : s;
}

#if !COURSE_HAS_CUPTI

KernelTimeResult measure_kernel_time(const std::function<void()>&, int, int) {
  KernelTimeResult result;
  result.why_not = gpu().available ? "built without CUPTI (not found in the CUDA Toolkit)" : gpu().why_not;
  return result;
}

#else

namespace {

// The record types of this CUPTI (the fields read here, start, end and name, sit at the same offsets
// in every version of a record).
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
#else
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
#endif
using MemsetRecord = CUpti_ActivityMemset4;

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                     CUPTI_ACTIVITY_KIND_MEMCPY};

std::mutex g_mutex;
std::vector<GpuOp>* g_sink = nullptr;  // where the records go while a measurement runs
std::string g_disabled;                // set once CUPTI failed: why

struct CuptiFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void cupti_check(CUptiResult status, const char* call) {
  if (status == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(status, &text);
  throw CuptiFailure(std::string(call) + " failed: " + (text ? text : "unknown CUPTI error"));
}
#define KT_CUPTI_CHECK(call) cupti_check((call), #call)

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

constexpr size_t kBufferBytes = size_t(1) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  // A record without both timestamps (not completed) is left out.
  const auto keep = [](std::string name, uint64_t start, uint64_t end) {
    if (start != 0 && end >= start) g_sink->push_back({std::move(name), double(start), double(end), false});
  };
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (g_sink == nullptr) continue;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const KernelRecord*>(record);
        keep(demangled(k->name), k->start, k->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const MemsetRecord*>(record);
        keep("memset", m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
        keep("memcpy", m->start, m->end);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

// The GPU work of `run`, as CUPTI recorded it, appended to `ops`.
void record(const std::function<void()>& run, std::vector<GpuOp>& ops) {
  static const bool registered = [] {
    KT_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    return true;
  }();
  (void)registered;
  CUDA_CHECK(cudaDeviceSynchronize());
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_sink = &ops;
  }
  // On the way out, also when something throws: the records off, the last ones delivered into
  // `ops`, the sink detached.
  struct Off {
    ~Off() {
      for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      std::lock_guard<std::mutex> lock(g_mutex);
      g_sink = nullptr;
    }
  } off;
  for (CUpti_ActivityKind kind : kKinds) KT_CUPTI_CHECK(cuptiActivityEnable(kind));
  run();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

KernelTimeResult measure_kernel_time(const std::function<void()>& launch, int reps, int warmup) {
  KernelTimeResult result;
  if (!gpu().available) {
    result.why_not = gpu().why_not;
    return result;
  }
  if (!g_disabled.empty()) {
    result.why_not = g_disabled;
    return result;
  }
  try {
    // What the flush alone runs on the GPU, so that its pieces can be told from the call's (once
    // before, so that its buffer's first-use set-up is not taken for part of it).
    flush_l2();
    std::vector<GpuOp> flush_ops, ops;
    record([] { flush_l2(); }, flush_ops);
    std::vector<std::string> flush_names;
    for (const auto& op : flush_ops) flush_names.push_back(op.name);
    if (flush_names.empty()) throw CuptiFailure("CUPTI recorded no GPU work for the L2 flush");
    for (int i = 0; i < warmup; ++i) {
      flush_l2();
      launch();
    }
    record(
        [&] {
          for (int i = 0; i < reps; ++i) {
            flush_l2();
            launch();
            CUDA_CHECK(cudaDeviceSynchronize());  // one call at a time, as the timer runs them
          }
        },
        ops);
    std::stable_sort(ops.begin(), ops.end(), [](const GpuOp& a, const GpuOp& b) { return a.start_ns < b.start_ns; });
    mark_flush(ops, flush_names);
    for (auto& op : ops) op.name = short_kernel_name(op.name);
    result.time = kernel_time_of(split_calls(std::move(ops)), reps, result.why_not);
  } catch (const CuptiFailure& e) {  // CUDA errors of `launch` propagate
    g_disabled = std::string("kernel time unavailable: ") + e.what();
    result.why_not = g_disabled;
  }
  return result;
}

#endif  // COURSE_HAS_CUPTI

}  // namespace course
