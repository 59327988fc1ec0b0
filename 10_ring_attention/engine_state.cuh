// Stage 10's engine inside (engine.cu: the ring's setup and forward; engine_backward.cu: its
// backward): what a rank holds, and the passes round the ring that both directions take.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#if COURSE_HAS_NCCL
#include <nccl.h>
#endif

#include "../08_flash_v3/kernels.cuh"
#include "check.hpp"
#include "device_buffer.hpp"
#include "engine.hpp"
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

inline cudaEvent_t new_event(bool timed) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

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

}  // namespace ring
