// Stage 10 on the GPUs (engine.cu): the ring of split.hpp run by one process that drives every
// GPU. Each rank keeps its chunks of Q and its running (O, L); its K/V shard travels: at step s the
// rank computes its pairs against the shard in hand (stage 08's last rung, one launch a pair, then
// the ⊕ of merge.hpp), while the shard moves one rank on, into the other of two buffers.
//
// Why one process for all GPUs, not one a GPU (as torchrun starts them): the course's programs stay
// one program (its options, its table, its checks), NCCL's ncclCommInitAll makes every rank's
// communicator at once, and the sends and receives of all ranks go into one ncclGroupStart/End.
// The price: one thread launches every GPU's kernels in turn (a few microseconds each, against
// pairs of milliseconds), and one process failing takes every rank with it. A framework runs one
// process a GPU so that ranks can sit on different machines; what travels is the same.
//
// Transport::nccl: rank r on GPU r, ncclSend/ncclRecv on a stream of its own. Transport::peer: rank
// r on GPU r, each rank pulls the shard from rank r − 1 with cudaMemcpyPeerAsync over NVLink: the
// GPUs' copy engines move it, where NCCL's kernels use SMs (the comparison of chapter 10).
// Transport::copies: all G ranks on one GPU, a device-to-device copy in place of each send/receive
// pair (the tests' single-GPU mode: the same schedule, buffers and merges, on the GPU a machine has).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ring.hpp"

namespace ring {

enum class Transport { nccl, peer, copies };
// What forward() runs: all of it; the attention and merges alone (every rank computes on the shard it
// holds, nothing travels: the compute time); the transfers alone.
enum class Part { all, compute, transfers };

bool built_with_nccl();
// The GPUs this process sees (0 when none).
int gpu_count();

class Engine {
 public:
  // Throws UsageError when the transport cannot run here: nccl needs G GPUs and a build with NCCL.
  Engine(const Split& split, const Shape& s, course::Dtype t, Transport transport);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Q, K, V: the whole sequence in stage 06's layout (B·H heads of N rows × d), bits of the dtype.
  // Scattered into the ranks' chunks; padding rows are zero.
  void upload(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V);
  // The backward pass, on the O and L of the last forward: dO (the whole sequence, as upload's
  // tensors) scattered to the ranks; then each rank's pairs by stage 07's fastest key-outer pass
  // (split at d = 128, wide at d = 64), dQ summed where it is (in float, dQacc), and dK, dV summed
  // in float as they travel with their K/V shard, one pass behind it, home after G passes.
  void upload_dO(const std::uint16_t* dO);
  void backward();
  // dQ, dK, dV of the whole sequence, gathered (after wait()).
  void download_gradients(std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV) const;
  // Fills every rank's O and L with NaN, so that a row the ring never writes fails the check.
  void poison();
  // Fills the buffers that shards and sums pass through (kv[1], kv[2], dK/dV's two) with NaN: a
  // pass that reads one before its transfer landed then fails, instead of finding the bytes that
  // the previous call left there (the tests, between calls).
  void poison_transit();
  // Enqueues one forward pass on every rank. GPU 0's default stream waits for all of it, so that a
  // timer on GPU 0 (events, Bench) spans the whole ring.
  void forward(Part part = Part::all);
  // Waits on the host for the last forward, at most timeout_s seconds; then (a rank that never got
  // its shard) aborts the communicators and throws.
  void wait(double timeout_s = 60.0) const;
  // O (bits of the dtype) and L of the whole sequence, gathered from the ranks (after wait()).
  void download(std::uint16_t* O, float* L) const;
  // Each rank's timeline in the last forward (ms, from its events): its span, from the start to its
  // O; the time its K/V passes took (from the moment its stream could send to the shard's arrival;
  // over NCCL that includes waiting for the neighbour; with copies, all G copies of a step); and
  // the time its compute stood waiting for a shard (arrival after the step's pairs were done).
  // hidden = 1 − waited / transfers: the share of the transfers under the compute. After a
  // backward, the same for its K/V passes, and for the passes of the running dK, dV: their time
  // (sums_ms, the last pass home included), the time the compute waited for them before adding its
  // share (sums_waited_ms, from its pairs done to the sums' arrival) and the last pass home, which
  // nothing can hide (home_ms, from the last step's sums done to their arrival at home).
  struct Timeline {
    float span_ms = 0, transfers_ms = 0, waited_ms = 0;
    float sums_ms = 0, sums_waited_ms = 0, home_ms = 0;  // the backward's alone; 0 after a forward
  };
  std::vector<Timeline> timeline() const;
  // The host's time (ms) to enqueue the last forward: launches, NCCL's group, the event calls.
  double enqueue_ms() const;
  // Bytes each rank sent in the last forward (what the ring's calls asked to move).
  std::vector<std::uint64_t> bytes_sent() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ring
