#include "engine.hpp"

#include <thread>

#include "engine_state.cuh"

namespace ring {

bool built_with_nccl() { return COURSE_HAS_NCCL != 0; }

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

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
