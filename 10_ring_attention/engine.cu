#include "engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#if COURSE_HAS_NCCL
#include <nccl.h>
#endif

#include "../08_flash_v3/kernels.cuh"
#include "check.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"

#if COURSE_HAS_NCCL
#define NCCL_CHECK(expression)                                                                              \
  do {                                                                                                      \
    const ncclResult_t nccl_status = (expression);                                                          \
    if (nccl_status != ncclSuccess)                                                                         \
      throw std::runtime_error(std::string(#expression) + " failed: " + ncclGetErrorString(nccl_status)); \
  } while (0)
#endif

namespace ring {

bool built_with_nccl() { return COURSE_HAS_NCCL != 0; }

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

namespace {

// Sets the current GPU for the life of a scope, and puts the previous one back.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    CUDA_CHECK(cudaSetDevice(device));
  }
  ~OnDevice() { cudaSetDevice(previous_); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

cudaEvent_t new_event(bool timed) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

}  // namespace

// One rank: its GPU, its buffers (all chunks × B·H heads × c rows × d), its transfer stream, its
// events. The compute runs on the GPU's default stream, where stage 08's launcher puts its kernel.
struct RankState {
  int device = 0;
  cudaStream_t transfers = nullptr;  // a stream that does not wait for the default one (non-blocking)
  cudaEvent_t begin = nullptr, finished = nullptr;  // the rank's span in the last forward
  // Step s: its pairs done; its transfer free to start (the stream past its waits); the shard in place.
  std::vector<cudaEvent_t> computed, sending, arrived;
  course::DeviceBuffer<std::uint16_t> q, kv[2], op, o;  // kv[b]: K's chunks, then V's
  course::DeviceBuffer<float> o_acc, l_acc, lp;
#if COURSE_HAS_NCCL
  ncclComm_t comm = nullptr;
#endif
};

struct Engine::Impl {
  Split split;
  Shape s;
  course::Dtype t;
  Transport transport;
  std::vector<RankState> ranks;
  cudaEvent_t begin0 = nullptr, done0 = nullptr;  // on GPU 0: the forward's start and end
  std::vector<std::uint64_t> sent;
  bool moved = false;  // the last forward had transfers
  double enqueue_ms = 0;

  std::size_t chunk_values() const { return std::size_t(s.heads()) * split.c() * s.d; }
  std::size_t chunk_rows() const { return std::size_t(s.heads()) * split.c(); }
  std::uint64_t shard_bytes() const { return ring::shard_bytes(split, s, t); }

  Impl(const Split& sp, const Shape& shape, course::Dtype dtype, Transport tr)
      : split(sp), s(shape), t(dtype), transport(tr), ranks(std::size_t(sp.G())), sent(std::size_t(sp.G()), 0) {}

  // The transfers of one step, enqueued on every rank's transfer stream after the rank's previous
  // pairs (whose buffer the incoming shard overwrites): the shard in slot `from` goes to rank r + 1's
  // slot `to`.
  void transfer(int step, int from, int to) {
    const int G = split.G();
    const std::size_t bytes = shard_bytes();
    if (transport == Transport::copies) {
      RankState& r0 = ranks[0];  // one GPU, one transfer stream
      if (step > 0)
        for (const RankState& r : ranks) CUDA_CHECK(cudaStreamWaitEvent(r0.transfers, r.computed[step - 1], 0));
      for (const RankState& r : ranks) CUDA_CHECK(cudaEventRecord(r.sending[step], r0.transfers));
      // Rank r's shard to rank r + 1: the copies read every slot `from` and write every slot `to`, a
      // different buffer, so their order does not matter.
      for (int r = 0; r < G; ++r)
        CUDA_CHECK(cudaMemcpyAsync(ranks[(r + 1) % G].kv[to].get(), ranks[r].kv[from].get(), bytes,
                                   cudaMemcpyDeviceToDevice, r0.transfers));
      for (const RankState& r : ranks) CUDA_CHECK(cudaEventRecord(r.arrived[step], r0.transfers));
    } else if (transport == Transport::peer) {
      for (int q = 0; q < G; ++q) {  // rank q pulls rank p's shard
        RankState &x = ranks[std::size_t(q)], &p = ranks[std::size_t((q + G - 1) % G)];
        OnDevice on(x.device);
        if (step > 0) {
          CUDA_CHECK(cudaStreamWaitEvent(x.transfers, x.computed[step - 1], 0));  // q's slot `to` used
          CUDA_CHECK(cudaStreamWaitEvent(x.transfers, p.arrived[step - 1], 0));   // p's slot `from` filled
          CUDA_CHECK(cudaStreamWaitEvent(x.transfers, ranks[std::size_t((q + 1) % G)].arrived[step - 1], 0));  // read
        }
        CUDA_CHECK(cudaEventRecord(x.sending[step], x.transfers));
        CUDA_CHECK(cudaMemcpyPeerAsync(x.kv[to].get(), x.device, p.kv[from].get(), p.device, bytes, x.transfers));
        CUDA_CHECK(cudaEventRecord(x.arrived[step], x.transfers));
      }
    } else {
#if COURSE_HAS_NCCL
      for (RankState& r : ranks) {
        OnDevice on(r.device);
        if (step > 0) CUDA_CHECK(cudaStreamWaitEvent(r.transfers, r.computed[step - 1], 0));
        CUDA_CHECK(cudaEventRecord(r.sending[step], r.transfers));
      }
      // One thread drives every rank: their sends and receives must be one group, or the first
      // rank's send would wait for a receive that this thread has not posted yet.
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < G; ++r) {
        RankState& x = ranks[r];
        NCCL_CHECK(ncclSend(x.kv[from].get(), bytes, ncclUint8, (r + 1) % G, x.comm, x.transfers));
        NCCL_CHECK(ncclRecv(x.kv[to].get(), bytes, ncclUint8, (r + G - 1) % G, x.comm, x.transfers));
      }
      NCCL_CHECK(ncclGroupEnd());
      for (RankState& r : ranks) {
        OnDevice on(r.device);
        CUDA_CHECK(cudaEventRecord(r.arrived[step], r.transfers));
      }
#else
      throw std::logic_error("transfer: built without NCCL");
#endif
    }
    for (std::uint64_t& b : sent) b += bytes;
  }

  // Rank r's pairs at `step` against the shard in slot `slot`, each merged into (O, L).
  void compute(int r, int step, int slot, std::vector<bool>& seen) {
    RankState& x = ranks[std::size_t(r)];
    const int R = split.per_rank(), src = split.source(r, step);
    const std::size_t n = chunk_values(), rows = chunk_rows();
    for (const Pair& p : split.pairs(r, step, s.causal)) {
      Shape pair = s;
      pair.N = split.c();
      pair.causal = p.causal;
      const std::uint16_t* kv = x.kv[slot].get();
      attention::launch_fa3_tuned_keys(pair, split.rows(split.chunk_of(src, p.kv)), t, x.q.get() + p.q * n,
                                       kv + p.kv * n, kv + (R + p.kv) * n, x.op.get(), x.lp.get());
      launch_merge(t, int(rows), s.d, x.o_acc.get() + p.q * n, x.l_acc.get() + p.q * rows, x.op.get(), x.lp.get(),
                   !seen[std::size_t(p.q)], nullptr);
      seen[std::size_t(p.q)] = true;
    }
  }
};

Engine::Engine(const Split& split, const Shape& s, course::Dtype t, Transport transport)
    : impl_(std::make_unique<Impl>(split, s, t, transport)) {
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  "stage 10 runs fp16 or bf16 (stage 08's kernel), not " + std::string(course::name(t)));
  course::require(s.N == split.N(), "Engine: the split is for another N");
  const int G = split.G(), gpus = gpu_count();
  course::require(gpus > 0, "stage 10: no GPU");
  course::require(transport != Transport::nccl || built_with_nccl(),
                  "the ring over NCCL needs a build with NCCL (see the stage's CMakeLists)");
  course::require(transport == Transport::copies || G <= gpus,
                  "the ring over NCCL or peer copies needs a GPU a rank: G = " + std::to_string(G) +
                      ", this machine has " + std::to_string(gpus));
  Impl& m = *impl_;
  const std::size_t n = m.chunk_values(), rows = m.chunk_rows(), R = std::size_t(split.per_rank());
  for (int r = 0; r < G; ++r) {
    RankState& x = m.ranks[std::size_t(r)];
    x.device = transport == Transport::copies ? 0 : r;
    OnDevice on(x.device);
    if (transport != Transport::copies || r == 0)
      CUDA_CHECK(cudaStreamCreateWithFlags(&x.transfers, cudaStreamNonBlocking));
    else
      x.transfers = m.ranks[0].transfers;
    x.begin = new_event(true);
    x.finished = new_event(true);
    for (auto* events : {&x.computed, &x.sending, &x.arrived})
      for (int k = 0; k < G; ++k) events->push_back(new_event(true));
    x.q = course::DeviceBuffer<std::uint16_t>(R * n);
    for (auto& b : x.kv) b = course::DeviceBuffer<std::uint16_t>(2 * R * n);
    x.op = course::DeviceBuffer<std::uint16_t>(n);
    // Set once: every row of it is written by each pair's kernel, but by TMA stores, which
    // compute-sanitizer's initcheck does not see as writes (it flagged the merge's reads).
    CUDA_CHECK(cudaMemset(x.op.get(), 0, x.op.bytes()));
    x.o = course::DeviceBuffer<std::uint16_t>(R * n);
    x.o_acc = course::DeviceBuffer<float>(R * n);
    x.l_acc = course::DeviceBuffer<float>(R * rows);
    x.lp = course::DeviceBuffer<float>(rows);
  }
  {
    OnDevice on(m.ranks[0].device);
    m.begin0 = new_event(false);
    m.done0 = new_event(false);
  }
  if (transport == Transport::peer)  // rank r reads rank r − 1's memory
    for (int r = 0; r < G; ++r) {
      const int from = (r + G - 1) % G;
      if (from == r) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, r, from));
      course::require(can != 0, "peer copies: GPU " + std::to_string(r) + " cannot read GPU " + std::to_string(from));
      OnDevice on(r);
      const cudaError_t status = cudaDeviceEnablePeerAccess(from, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
      else CUDA_CHECK(status);
    }
#if COURSE_HAS_NCCL
  if (transport == Transport::nccl) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(G));
    std::vector<int> devices(static_cast<std::size_t>(G));
    for (int r = 0; r < G; ++r) devices[std::size_t(r)] = r;
    NCCL_CHECK(ncclCommInitAll(comms.data(), G, devices.data()));
    for (int r = 0; r < G; ++r) m.ranks[std::size_t(r)].comm = comms[std::size_t(r)];
  }
#endif
}

Engine::~Engine() {
  if (!impl_) return;
  for (RankState& x : impl_->ranks) {
    cudaSetDevice(x.device);
    cudaDeviceSynchronize();
#if COURSE_HAS_NCCL
    if (x.comm) ncclCommDestroy(x.comm);
#endif
    for (cudaEvent_t e : {x.begin, x.finished})
      if (e) cudaEventDestroy(e);
    for (const auto* events : {&x.computed, &x.sending, &x.arrived})
      for (cudaEvent_t e : *events) cudaEventDestroy(e);
    if (x.transfers && (impl_->transport != Transport::copies || &x == &impl_->ranks[0]))
      cudaStreamDestroy(x.transfers);
  }
  cudaSetDevice(impl_->ranks[0].device);
  if (impl_->begin0) cudaEventDestroy(impl_->begin0);
  if (impl_->done0) cudaEventDestroy(impl_->done0);
}

void Engine::upload(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V) {
  Impl& m = *impl_;
  const Split& sp = m.split;
  const std::size_t n = m.chunk_values(), d = std::size_t(m.s.d), row_bytes = d * sizeof(std::uint16_t);
  const int R = sp.per_rank();
  for (int r = 0; r < sp.G(); ++r) {
    RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    CUDA_CHECK(cudaMemset(x.q.get(), 0, x.q.bytes()));  // padding rows: zero
    for (auto& b : x.kv) CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
    for (int k = 0; k < R; ++k) {
      const int chunk = sp.chunk_of(r, k);
      // Head h's rows start(chunk) … of the sequence to rows 0 … of the chunk's head h.
      auto copy = [&](std::uint16_t* dst, const std::uint16_t* src) {
        CUDA_CHECK(cudaMemcpy2D(dst, std::size_t(sp.c()) * row_bytes, src + std::size_t(sp.start(chunk)) * d,
                                std::size_t(m.s.N) * row_bytes, std::size_t(sp.rows(chunk)) * row_bytes,
                                std::size_t(m.s.heads()), cudaMemcpyHostToDevice));
      };
      copy(x.q.get() + k * n, Q);
      copy(x.kv[0].get() + k * n, K);
      copy(x.kv[0].get() + (R + k) * n, V);
    }
  }
}

void Engine::poison() {
  for (RankState& x : impl_->ranks) {
    OnDevice on(x.device);
    CUDA_CHECK(cudaMemset(x.o.get(), 0xff, x.o.bytes()));  // 0xffff: NaN in fp16 and bf16
    CUDA_CHECK(cudaMemset(x.l_acc.get(), 0xff, x.l_acc.bytes()));
  }
}

void Engine::forward(Part part) {
  Impl& m = *impl_;
  const auto host_start = std::chrono::steady_clock::now();
  const int G = m.split.G();
  std::fill(m.sent.begin(), m.sent.end(), 0);
  m.moved = part != Part::compute && G > 1;
  {
    OnDevice on(m.ranks[0].device);
    CUDA_CHECK(cudaEventRecord(m.begin0, nullptr));
  }
  for (RankState& x : m.ranks) {  // every stream starts after GPU 0's begin
    OnDevice on(x.device);
    CUDA_CHECK(cudaStreamWaitEvent(nullptr, m.begin0, 0));
    CUDA_CHECK(cudaStreamWaitEvent(x.transfers, m.begin0, 0));
    CUDA_CHECK(cudaEventRecord(x.begin, nullptr));
  }
  std::vector<std::vector<bool>> seen(std::size_t(G), std::vector<bool>(std::size_t(m.split.per_rank()), false));
  for (int step = 0; step < G; ++step) {
    const int slot = part == Part::compute ? 0 : step % 2;
    const bool moves = step + 1 < G && part != Part::compute;
    if (moves) m.transfer(step, step % 2, (step + 1) % 2);  // the next shard travels while this one is used
    for (int r = 0; r < G; ++r) {
      RankState& x = m.ranks[std::size_t(r)];
      OnDevice on(x.device);
      if (part != Part::transfers) m.compute(r, step, slot, seen[std::size_t(r)]);
      CUDA_CHECK(cudaEventRecord(x.computed[step], nullptr));
      if (moves) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.arrived[step], 0));  // step + 1 needs it
    }
  }
  for (RankState& x : m.ranks) {
    OnDevice on(x.device);
    if (part != Part::transfers) launch_round(m.t, x.o.size(), x.o_acc.get(), x.o.get(), nullptr);
    CUDA_CHECK(cudaEventRecord(x.finished, nullptr));
  }
  OnDevice on(m.ranks[0].device);
  for (RankState& x : m.ranks) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.finished, 0));
  CUDA_CHECK(cudaEventRecord(m.done0, nullptr));
  m.enqueue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
}

double Engine::enqueue_ms() const { return impl_->enqueue_ms; }

void Engine::wait(double timeout_s) const {
  const Impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const cudaError_t status = cudaEventQuery(m.done0);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
#if COURSE_HAS_NCCL
    for (const RankState& x : m.ranks)
      if (x.comm) {
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(x.comm, &async));
        NCCL_CHECK(async);
      }
#endif
    if (std::chrono::steady_clock::now() > deadline) {
#if COURSE_HAS_NCCL
      for (const RankState& x : m.ranks)
        if (x.comm) ncclCommAbort(x.comm);
#endif
      throw std::runtime_error("the ring did not finish within " + std::to_string(timeout_s) +
                               " s (a rank waits for a shard that never came); communicators aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Engine::download(std::uint16_t* O, float* L) const {
  const Impl& m = *impl_;
  const Split& sp = m.split;
  const std::size_t n = m.chunk_values(), rows = m.chunk_rows(), d = std::size_t(m.s.d);
  for (int r = 0; r < sp.G(); ++r) {
    const RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    for (int k = 0; k < sp.per_rank(); ++k) {
      const int chunk = sp.chunk_of(r, k);
      const std::size_t first = std::size_t(sp.start(chunk)), count = std::size_t(sp.rows(chunk));
      CUDA_CHECK(cudaMemcpy2D(O + first * d, std::size_t(m.s.N) * d * 2, x.o.get() + k * n,
                              std::size_t(sp.c()) * d * 2, count * d * 2, std::size_t(m.s.heads()),
                              cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy2D(L + first, std::size_t(m.s.N) * sizeof(float), x.l_acc.get() + k * rows,
                              std::size_t(sp.c()) * sizeof(float), count * sizeof(float),
                              std::size_t(m.s.heads()), cudaMemcpyDeviceToHost));
    }
  }
}

std::vector<Engine::Timeline> Engine::timeline() const {
  const Impl& m = *impl_;
  std::vector<Timeline> out;
  auto ms = [](cudaEvent_t a, cudaEvent_t b) {
    float x = 0;
    CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
    return x;
  };
  for (const RankState& x : m.ranks) {
    OnDevice on(x.device);
    CUDA_CHECK(cudaEventSynchronize(x.finished));
    Timeline t;
    t.span_ms = ms(x.begin, x.finished);
    if (m.moved)
      for (int step = 0; step + 1 < m.split.G(); ++step) {
        t.transfers_ms += ms(x.sending[std::size_t(step)], x.arrived[std::size_t(step)]);
        t.waited_ms += std::max(0.0f, ms(x.computed[std::size_t(step)], x.arrived[std::size_t(step)]));
      }
    out.push_back(t);
  }
  return out;
}

std::vector<std::uint64_t> Engine::bytes_sent() const { return impl_->sent; }

}  // namespace ring
