// Stage 10's backward (Engine::backward): the ring again, with dK and dV travelling behind their shard.
#include "../07_backward/kernels.cuh"
#include "engine_state.cuh"

namespace ring {

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

}  // namespace ring
