#include "engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#if COURSE_HAS_NCCL
#include <nccl.h>
#endif

#include "../07_backward/kernels.cuh"
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
  // kv[0]: the rank's own shard (K's chunks, then V's), never overwritten, so that every pass (a
  // second forward, the backward) starts from it; kv[1], kv[2]: the shards passing through, in turn.
  course::DeviceBuffer<std::uint16_t> q, kv[3], op, o;
  course::DeviceBuffer<float> o_acc, l_acc, lp;
  // The backward (allocated by upload_dO): dO and D of its query chunks, dQ summed in float (dQacc)
  // and in the dtype, dK and dV of the shard in hand summed in float (dkv[b]: dK's chunks, then
  // dV's; two buffers, as kv), each pair's dK and dV (dpart), and its own dK, dV at the end.
  course::DeviceBuffer<std::uint16_t> dO, dQ, dpart, dK, dV;
  course::DeviceBuffer<float> D, dQacc, dkv[2];
  std::vector<cudaEvent_t> dkv_sending, dkv_arrived;
  std::vector<cudaEvent_t> pairs_done;  // step s of a backward: its pairs' kernels done, before the sums' wait
#if COURSE_HAS_NCCL
  mutable ncclComm_t comm = nullptr;  // null again once aborted (wait's timeout)
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
  bool forward_done = false;  // O and L hold a whole forward's result
  bool backward_last = false;  // the last call was a backward (timeline() reads its sums' events too)
  double enqueue_ms = 0;

  std::size_t chunk_values() const { return std::size_t(s.heads()) * split.c() * s.d; }
  std::size_t chunk_rows() const { return std::size_t(s.heads()) * split.c(); }
  std::uint64_t shard_bytes() const { return ring::shard_bytes(split, s, t); }

  Impl(const Split& sp, const Shape& shape, course::Dtype dtype, Transport tr)
      : split(sp), s(shape), t(dtype), transport(tr), ranks(std::size_t(sp.G())), sent(std::size_t(sp.G()), 0) {}

  // Rank r's chunk k (c slots a head) and the same rows of the whole sequence (B·H heads of N rows),
  // `row_bytes` a row: one 2-D copy, head by head. scatter: sequence to chunk; gather: back.
  void scatter(int r, int k, void* chunk, const void* sequence, std::size_t row_bytes) const {
    const int j = split.chunk_of(r, k);
    CUDA_CHECK(cudaMemcpy2D(chunk, std::size_t(split.c()) * row_bytes,
                            static_cast<const char*>(sequence) + std::size_t(split.start(j)) * row_bytes,
                            std::size_t(s.N) * row_bytes, std::size_t(split.rows(j)) * row_bytes,
                            std::size_t(s.heads()), cudaMemcpyDefault));
  }
  void gather(int r, int k, void* sequence, const void* chunk, std::size_t row_bytes) const {
    const int j = split.chunk_of(r, k);
    CUDA_CHECK(cudaMemcpy2D(static_cast<char*>(sequence) + std::size_t(split.start(j)) * row_bytes,
                            std::size_t(s.N) * row_bytes, chunk, std::size_t(split.c()) * row_bytes,
                            std::size_t(split.rows(j)) * row_bytes, std::size_t(s.heads()), cudaMemcpyDefault));
  }

  // The start of a call (forward or backward): every rank's streams after GPU 0's begin, which comes
  // after the previous call's end; the end: GPU 0's default stream after every rank's `finished`.
  std::chrono::steady_clock::time_point begin_call() {
    const auto host_start = std::chrono::steady_clock::now();
    std::fill(sent.begin(), sent.end(), 0);
    {
      OnDevice on(ranks[0].device);
      CUDA_CHECK(cudaEventRecord(begin0, nullptr));
    }
    for (RankState& x : ranks) {
      OnDevice on(x.device);
      CUDA_CHECK(cudaStreamWaitEvent(nullptr, begin0, 0));
      CUDA_CHECK(cudaEventRecord(x.begin, nullptr));
      // The transfer stream after the rank's own default stream too (not GPU 0's alone): a
      // non-blocking stream does not wait for the legacy one, and upload() may return before its
      // last bytes have landed in kv[0].
      CUDA_CHECK(cudaStreamWaitEvent(x.transfers, x.begin, 0));
    }
    return host_start;
  }
  void end_call(std::chrono::steady_clock::time_point host_start) {
    OnDevice on(ranks[0].device);
    for (RankState& x : ranks) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.finished, 0));
    CUDA_CHECK(cudaEventRecord(done0, nullptr));
    enqueue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
  }

  using Events = std::vector<cudaEvent_t> RankState::*;
  using Buffer = std::function<void*(RankState&)>;

  // One pass round the ring at `step`: every rank's buffer src to rank r + 1's buffer dst, `bytes`
  // each, on the transfer streams, once the rank's `ready` event of step `ready_step` is reached
  // (its compute done with dst, and src complete; none when ready_step < 0). Marks sending[step]
  // and arrived[step]. A transfer stream runs its passes in order, so a pass never overwrites a
  // buffer that the stream's previous pass still reads.
  void ring_pass(int step, std::size_t bytes, const Buffer& src, const Buffer& dst, Events ready, int ready_step,
                 Events sending, Events arrived) {
    const int G = split.G();
    auto wait = [&](cudaStream_t stream, RankState& r, Events e, int k) {
      if (k >= 0) CUDA_CHECK(cudaStreamWaitEvent(stream, (r.*e)[std::size_t(k)], 0));
    };
    if (transport == Transport::copies) {
      RankState& r0 = ranks[0];  // one GPU, one transfer stream
      for (RankState& r : ranks) wait(r0.transfers, r, ready, ready_step);
      for (RankState& r : ranks) CUDA_CHECK(cudaEventRecord((r.*sending)[std::size_t(step)], r0.transfers));
      // Rank r's buffer to rank r + 1: the copies read every src and write every dst, different
      // buffers, so their order does not matter.
      for (int r = 0; r < G; ++r)
        CUDA_CHECK(cudaMemcpyAsync(dst(ranks[std::size_t((r + 1) % G)]), src(ranks[std::size_t(r)]), bytes,
                                   cudaMemcpyDeviceToDevice, r0.transfers));
      for (RankState& r : ranks) CUDA_CHECK(cudaEventRecord((r.*arrived)[std::size_t(step)], r0.transfers));
    } else if (transport == Transport::peer) {
      for (int q = 0; q < G; ++q) {  // rank q pulls from rank p = q − 1
        RankState &x = ranks[std::size_t(q)], &p = ranks[std::size_t((q + G - 1) % G)];
        OnDevice on(x.device);
        wait(x.transfers, x, ready, ready_step);  // q's dst free
        if (ready_step == step) wait(x.transfers, p, ready, ready_step);  // p's src complete (the sums' pass)
        // p's src arrived by p's own pull of the previous step (on p's stream, not this one)
        wait(x.transfers, p, arrived, step - 1);
        // and q's dst was read by q + 1's pull of the previous step
        wait(x.transfers, ranks[std::size_t((q + 1) % G)], arrived, step - 1);
        CUDA_CHECK(cudaEventRecord((x.*sending)[std::size_t(step)], x.transfers));
        CUDA_CHECK(cudaMemcpyPeerAsync(dst(x), x.device, src(p), p.device, bytes, x.transfers));
        CUDA_CHECK(cudaEventRecord((x.*arrived)[std::size_t(step)], x.transfers));
      }
    } else {
#if COURSE_HAS_NCCL
      for (RankState& r : ranks) {
        OnDevice on(r.device);
        wait(r.transfers, r, ready, ready_step);
        CUDA_CHECK(cudaEventRecord((r.*sending)[std::size_t(step)], r.transfers));
      }
      // One thread drives every rank: their sends and receives must be one group, or the first
      // rank's send would wait for a receive that this thread has not posted yet.
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < G; ++r) {
        RankState& x = ranks[std::size_t(r)];
        NCCL_CHECK(ncclSend(src(x), bytes, ncclUint8, (r + 1) % G, x.comm, x.transfers));
        NCCL_CHECK(ncclRecv(dst(x), bytes, ncclUint8, (r + G - 1) % G, x.comm, x.transfers));
      }
      NCCL_CHECK(ncclGroupEnd());
      for (RankState& r : ranks) {
        OnDevice on(r.device);
        CUDA_CHECK(cudaEventRecord((r.*arrived)[std::size_t(step)], r.transfers));
      }
#else
      throw std::logic_error("ring_pass: built without NCCL");
#endif
    }
    for (std::uint64_t& b : sent) b += bytes;
  }

  // Where the shard of step `step` lies: kv[0] at step 0, then kv[1], kv[2], kv[1], ... (With two
  // buffers, kv[0] would hold rank r − 2's shard after a forward on 3 or more ranks, and the next
  // pass would start from it: the test with G = 3 caught that.)
  static int kv_slot(int step) { return step == 0 ? 0 : 1 + (step - 1) % 2; }

  // The forward's pass: the shard in slot `from` to rank r + 1's slot `to`, after the pairs of the
  // step before (whose buffer the incoming shard overwrites).
  void transfer(int step, int from, int to) {
    ring_pass(
        step, shard_bytes(), [from](RankState& r) -> void* { return r.kv[from].get(); },
        [to](RankState& r) -> void* { return r.kv[to].get(); }, &RankState::computed, step - 1, &RankState::sending,
        &RankState::arrived);
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
    for (const auto* events : {&x.computed, &x.sending, &x.arrived, &x.dkv_sending, &x.dkv_arrived, &x.pairs_done})
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
  const std::size_t n = m.chunk_values(), row_bytes = std::size_t(m.s.d) * 2;
  const int R = m.split.per_rank();
  for (int r = 0; r < m.split.G(); ++r) {
    RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    CUDA_CHECK(cudaMemset(x.q.get(), 0, x.q.bytes()));  // padding rows: zero
    for (auto& b : x.kv) CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
    for (int k = 0; k < R; ++k) {
      m.scatter(r, k, x.q.get() + k * n, Q, row_bytes);
      m.scatter(r, k, x.kv[0].get() + k * n, K, row_bytes);
      m.scatter(r, k, x.kv[0].get() + (R + k) * n, V, row_bytes);
    }
  }
}

void Engine::upload_dO(const std::uint16_t* dO) {
  Impl& m = *impl_;
  const Split& sp = m.split;
  const int R = sp.per_rank(), G = sp.G();
  const std::size_t n = m.chunk_values(), rows = m.chunk_rows();
  for (int r = 0; r < G; ++r) {
    RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    if (x.dO.size() == 0) {
      x.dO = course::DeviceBuffer<std::uint16_t>(R * n);
      x.dQ = course::DeviceBuffer<std::uint16_t>(R * n);
      x.dK = course::DeviceBuffer<std::uint16_t>(R * n);
      x.dV = course::DeviceBuffer<std::uint16_t>(R * n);
      x.dpart = course::DeviceBuffer<std::uint16_t>(2 * std::size_t(R) * R * n);  // a pair's dK, dV: R·R pairs at most
      x.D = course::DeviceBuffer<float>(R * rows);
      x.dQacc = course::DeviceBuffer<float>(R * n);
      for (auto& b : x.dkv) b = course::DeviceBuffer<float>(2 * R * n);
      for (auto* events : {&x.dkv_sending, &x.dkv_arrived, &x.pairs_done})
        for (int k = 0; k < G; ++k) events->push_back(new_event(true));
    }
    CUDA_CHECK(cudaMemset(x.dO.get(), 0, x.dO.bytes()));  // padding rows: zero
    for (int k = 0; k < R; ++k)
      m.scatter(r, k, x.dO.get() + k * n, dO, std::size_t(m.s.d) * 2);
  }
}

void Engine::backward() {
  Impl& m = *impl_;
  const Split& sp = m.split;
  const int G = sp.G(), R = sp.per_rank();
  course::require(m.ranks[0].dO.size() > 0, "Engine::backward: upload_dO first");
  course::require(m.forward_done, "Engine::backward: a whole forward (Part::all) first: it takes O and L from it");
  const std::size_t n = m.chunk_values(), rows = m.chunk_rows();
  const bool d128 = m.s.d == 128;
  m.moved = G > 1;
  m.backward_last = true;
  Shape chunk = m.s;
  chunk.N = sp.c();
  const auto host_start = m.begin_call();
  for (RankState& x : m.ranks) {
    OnDevice on(x.device);
    // D = rowsum(dO ∘ O) and dQacc = 0, chunk by chunk (O and L: the last forward's).
    for (int k = 0; k < R; ++k) {
      attention::BackwardArgs a{};
      a.O = x.o.get() + k * n;
      a.dO = x.dO.get() + k * n;
      a.D = x.D.get() + k * rows;
      a.dQacc = x.dQacc.get() + k * n;
      attention::launch_backward_preprocess(chunk, m.t, a);
    }
    CUDA_CHECK(cudaMemsetAsync(x.dkv[0].get(), 0, x.dkv[0].bytes(), nullptr));  // the own shard's sums start at 0
  }
  auto dkv_pass = [&](int step) {  // after the step's sums: dK, dV of the shard in hand to rank r + 1
    const int from = step % 2, to = (step + 1) % 2;
    m.ring_pass(
        step, 2 * R * n * sizeof(float), [from](RankState& r) -> void* { return r.dkv[from].get(); },
        [to](RankState& r) -> void* { return r.dkv[to].get(); }, &RankState::computed, step, &RankState::dkv_sending,
        &RankState::dkv_arrived);
  };
  for (int step = 0; step < G; ++step) {
    const int slot = Impl::kv_slot(step);
    const bool moves = step + 1 < G;
    if (moves) m.transfer(step, slot, Impl::kv_slot(step + 1));  // the next K/V while this one is used
    for (int r = 0; r < G; ++r) {
      RankState& x = m.ranks[std::size_t(r)];
      OnDevice on(x.device);
      const int src = sp.source(r, step);
      const std::vector<Pair> pairs = sp.pairs(r, step, m.s.causal);
      // The pairs' gradients: dQ's share into dQacc (atomics), dK and dV into a buffer each.
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        const Pair& p = pairs[i];
        Shape pair = chunk;
        pair.causal = p.causal;
        attention::BackwardArgs a{};
        a.Q = x.q.get() + p.q * n;
        a.K = x.kv[slot].get() + p.kv * n;
        a.V = x.kv[slot].get() + (R + p.kv) * n;
        a.O = x.o.get() + p.q * n;
        a.dO = x.dO.get() + p.q * n;
        a.L = x.l_acc.get() + p.q * rows;
        a.D = x.D.get() + p.q * rows;
        a.dQacc = x.dQacc.get() + p.q * n;
        a.dK = x.dpart.get() + 2 * i * n;
        a.dV = x.dpart.get() + (2 * i + 1) * n;
        a.Nk = sp.rows(sp.chunk_of(src, p.kv));
        if (d128) attention::launch_flash_backward_split(pair, m.t, a);
        else attention::launch_flash_backward_wide(pair, m.t, a);
      }
      // The shard's running dK, dV came one pass behind it: wait, then add this rank's share.
      CUDA_CHECK(cudaEventRecord(x.pairs_done[std::size_t(step)], nullptr));
      if (step > 0) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.dkv_arrived[std::size_t(step - 1)], 0));
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        float* acc = x.dkv[step % 2].get();
        launch_accumulate(m.t, n, acc + pairs[i].kv * n, x.dpart.get() + 2 * i * n, nullptr);
        launch_accumulate(m.t, n, acc + (R + pairs[i].kv) * n, x.dpart.get() + (2 * i + 1) * n, nullptr);
      }
      CUDA_CHECK(cudaEventRecord(x.computed[std::size_t(step)], nullptr));
      if (moves) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.arrived[std::size_t(step)], 0));
    }
    if (G > 1) dkv_pass(step);  // the last pass takes them home
  }
  const int home = G > 1 ? G % 2 : 0;  // the slot where a rank's own dK, dV end
  for (RankState& x : m.ranks) {
    OnDevice on(x.device);
    if (G > 1) CUDA_CHECK(cudaStreamWaitEvent(nullptr, x.dkv_arrived[std::size_t(G - 1)], 0));
    launch_round(m.t, R * n, x.dkv[home].get(), x.dK.get(), nullptr);
    launch_round(m.t, R * n, x.dkv[home].get() + R * n, x.dV.get(), nullptr);
    for (int k = 0; k < R; ++k) {  // dQ = scale·dQacc
      attention::BackwardArgs a{};
      a.dQacc = x.dQacc.get() + k * n;
      a.dQ = x.dQ.get() + k * n;
      attention::launch_dq_convert(chunk, m.t, a);
    }
    CUDA_CHECK(cudaEventRecord(x.finished, nullptr));
  }
  m.end_call(host_start);
}

void Engine::download_gradients(std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV) const {
  const Impl& m = *impl_;
  const std::size_t n = m.chunk_values(), row_bytes = std::size_t(m.s.d) * 2;
  for (int r = 0; r < m.split.G(); ++r) {
    const RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    for (int k = 0; k < m.split.per_rank(); ++k)
      for (auto [out, in] : {std::pair{dQ, x.dQ.get()}, std::pair{dK, x.dK.get()}, std::pair{dV, x.dV.get()}})
        m.gather(r, k, out, in + k * n, row_bytes);
  }
}

void Engine::poison_transit() {
  for (RankState& x : impl_->ranks) {
    OnDevice on(x.device);
    for (int b : {1, 2}) CUDA_CHECK(cudaMemset(x.kv[b].get(), 0xff, x.kv[b].bytes()));
    for (auto& b : x.dkv)
      if (b.size()) CUDA_CHECK(cudaMemset(b.get(), 0xff, b.bytes()));
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
  const int G = m.split.G();
  m.moved = part != Part::compute && G > 1;
  m.forward_done = part == Part::all;
  m.backward_last = false;
  const auto host_start = m.begin_call();
  std::vector<std::vector<bool>> seen(std::size_t(G), std::vector<bool>(std::size_t(m.split.per_rank()), false));
  for (int step = 0; step < G; ++step) {
    const int slot = part == Part::compute ? 0 : Impl::kv_slot(step);
    const bool moves = step + 1 < G && part != Part::compute;
    if (moves) m.transfer(step, slot, Impl::kv_slot(step + 1));  // the next shard travels while this one is used
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
  m.end_call(host_start);
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
        if (x.comm) {
          ncclCommAbort(x.comm);  // frees it: the destructor must not destroy it again
          x.comm = nullptr;
        }
#endif
      throw std::runtime_error("the ring did not finish within " + std::to_string(timeout_s) +
                               " s (a rank waits for a shard that never came); communicators aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Engine::download(std::uint16_t* O, float* L) const {
  const Impl& m = *impl_;
  const std::size_t n = m.chunk_values(), rows = m.chunk_rows();
  for (int r = 0; r < m.split.G(); ++r) {
    const RankState& x = m.ranks[std::size_t(r)];
    OnDevice on(x.device);
    for (int k = 0; k < m.split.per_rank(); ++k) {
      m.gather(r, k, O, x.o.get() + k * n, std::size_t(m.s.d) * 2);
      m.gather(r, k, L, x.l_acc.get() + k * rows, sizeof(float));
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
    if (m.backward_last && m.moved) {
      const int G = m.split.G();
      for (int step = 0; step < G; ++step) {
        t.sums_ms += ms(x.dkv_sending[std::size_t(step)], x.dkv_arrived[std::size_t(step)]);
        if (step > 0)
          t.sums_waited_ms +=
              std::max(0.0f, ms(x.pairs_done[std::size_t(step)], x.dkv_arrived[std::size_t(step - 1)]));
      }
      t.home_ms = std::max(0.0f, ms(x.computed[std::size_t(G - 1)], x.dkv_arrived[std::size_t(G - 1)]));
    }
    out.push_back(t);
  }
  return out;
}

std::vector<std::uint64_t> Engine::bytes_sent() const { return impl_->sent; }

}  // namespace ring
