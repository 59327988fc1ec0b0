#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "check.hpp"
#include "gpu.hpp"
#include "timer.hpp"

namespace course {

namespace {

// Reads n int4s; the conditional store keeps the loads from being optimised away.
__global__ void read_all(const int4* __restrict__ data, size_t n, int* sink, int never) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = data[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *sink = acc;
}

struct FlushBuffer {
  int4* data = nullptr;
  int* sink = nullptr;
  size_t count = 0;
  explicit FlushBuffer(size_t l2_bytes = gpu().l2_bytes) {
    const size_t bytes = std::max<size_t>(3 * l2_bytes, size_t(64) << 20);
    count = bytes / sizeof(int4);
    // Not a DeviceBuffer: this scratch space is not part of any problem's memory footprint.
    CUDA_CHECK(cudaMalloc(&data, count * sizeof(int4)));
    CUDA_CHECK(cudaMalloc(&sink, sizeof(int)));
    CUDA_CHECK(cudaMemset(data, 0, count * sizeof(int4)));  // all zeros: acc stays 0
    CUDA_CHECK(cudaMemset(sink, 0, sizeof(int)));
  }
};

struct Event {
  cudaEvent_t event{};
  Event() { CUDA_CHECK(cudaEventCreate(&event)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// The other GPUs of flush_l2_also: each its buffer (on that GPU) and an event for the wait.
struct OtherGpu {
  int device, sms;
  std::unique_ptr<FlushBuffer> buffer;
  cudaEvent_t flushed{};
};
std::vector<OtherGpu>& other_gpus() {
  static std::vector<OtherGpu> gpus;
  return gpus;
}

}  // namespace

void flush_l2_also(const std::vector<int>& devices) {
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  for (int d : devices) {
    if (d == current) continue;
    bool known = false;
    for (const OtherGpu& g : other_gpus()) known |= g.device == d;
    if (known) continue;
    OtherGpu g{d, 0, nullptr, {}};
    int l2 = 0;
    CUDA_CHECK(cudaSetDevice(d));
    CUDA_CHECK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, d));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d));
    g.buffer = std::make_unique<FlushBuffer>(size_t(l2));
    CUDA_CHECK(cudaEventCreateWithFlags(&g.flushed, cudaEventDisableTiming));
    CUDA_CHECK(cudaSetDevice(current));
    other_gpus().push_back(std::move(g));
  }
}

void flush_l2() {
  static FlushBuffer buffer;
  read_all<<<4 * gpu().sm_count, 512>>>(buffer.data, buffer.count, buffer.sink, 1);
  CUDA_CHECK_LAUNCH();
  if (other_gpus().empty()) return;
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  for (OtherGpu& g : other_gpus()) {
    CUDA_CHECK(cudaSetDevice(g.device));
    read_all<<<4 * g.sms, 512>>>(g.buffer->data, g.buffer->count, g.buffer->sink, 1);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaEventRecord(g.flushed, nullptr));
    CUDA_CHECK(cudaSetDevice(current));
    CUDA_CHECK(cudaStreamWaitEvent(nullptr, g.flushed, 0));
  }
}

Timing time_gpu(const std::function<void()>& launch, const TimingOptions& options) {
  for (int i = 0; i < options.warmup; ++i) {
    flush_l2();
    launch();
  }
  CUDA_CHECK(cudaDeviceSynchronize());

  Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < options.reps; ++i) {
    flush_l2();
    CUDA_CHECK(cudaEventRecord(start.event));
    launch();
    CUDA_CHECK(cudaEventRecord(stop.event));
    CUDA_CHECK(cudaEventSynchronize(stop.event));
    float elapsed = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, start.event, stop.event));
    ms.push_back(elapsed);
  }
  Timing timing;
  timing.reps = options.reps;
  if (ms.empty()) return timing;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  timing.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  timing.min_ms = ms.front();
  timing.max_ms = ms.back();
  return timing;
}

Sustained time_sustained(const std::function<void()>& launch, double seconds, const std::function<void(bool)>& mark) {
  using Clock = std::chrono::steady_clock;
  auto run_for = [&](double s, long* calls) {  // batches of 10, synchronised (a gap of microseconds a batch)
    const auto t0 = Clock::now();
    do {
      for (int i = 0; i < 10; ++i) launch();
      CUDA_CHECK(cudaDeviceSynchronize());
      if (calls) *calls += 10;
    } while (std::chrono::duration<double>(Clock::now() - t0).count() < s);
  };
  run_for(0.25 * seconds, nullptr);
  Sustained result;
  Event start, stop;
  mark(false);
  CUDA_CHECK(cudaEventRecord(start.event));
  run_for(seconds, &result.calls);
  CUDA_CHECK(cudaEventRecord(stop.event));
  CUDA_CHECK(cudaEventSynchronize(stop.event));
  mark(true);
  float elapsed = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&elapsed, start.event, stop.event));
  result.ms = elapsed;
  return result;
}

}  // namespace course
