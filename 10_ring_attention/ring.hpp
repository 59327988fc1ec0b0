// Stage 10 on the CPU: how one sequence is split over G ranks (GPUs), which K/V shard each rank
// holds at each step of the ring, which (query chunk, key chunk) pairs it computes then, and the
// bytes it sends; the ring itself run on the CPU (the reference of the schedule and of its bytes).
//
// The sequence of N rows is cut into chunks: G of them (the plain ring, rank r holds chunk r) or
// 2G (zigzag, rank r holds chunks r and 2G − 1 − r, so that under a causal mask every rank has the
// same work). The chunks' sizes differ by at most one row (the first N mod chunks are one longer),
// and every chunk is stored as c = ⌈N / chunks⌉ rows: a shorter chunk's last row is padding, its
// keys hidden by the kernel's key count (Nk), its query row computed and dropped.
//
// The ring: at step s = 0 … G − 1 rank r holds the K/V shard of rank (r − s) mod G, computes its
// queries against it, and passes it to rank r + 1 (while receiving the next from r − 1). Each
// (query chunk, key chunk) pair is one call of an attention kernel on c × c rows, which gives that
// pair's O and L; the pairs of a row merge by ⊕ (chapter 04) through L:
//   L = log(e^L₁ + e^L₂),  O = e^(L₁ − L)·O₁ + e^(L₂ − L)·O₂
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../06_flash_v2/algorithm.hpp"  // Shape
#include "dtype.hpp"

namespace ring {

using attention::Shape;

// One pair a rank computes at one step: its local query chunk q (0 or 1) against chunk kv (0 or 1)
// of the K/V shard in hand; causal: the two are the same chunk of the sequence (the diagonal),
// under the causal mask; otherwise every key is visible to every query.
struct Pair {
  int q, kv;
  bool causal;
};

class Split {
 public:
  // Throws UsageError when the sequence does not split: G < 1, or fewer rows than chunks.
  Split(int N, int G, bool zigzag);

  int N() const { return N_; }
  int G() const { return G_; }
  bool zigzag() const { return zigzag_; }
  int chunks() const { return zigzag_ ? 2 * G_ : G_; }
  int per_rank() const { return zigzag_ ? 2 : 1; }
  int c() const { return c_; }  // rows stored per chunk
  int rows(int chunk) const;    // its rows of the sequence (c or c − 1)
  int start(int chunk) const;   // its first row in the sequence
  int chunk_of(int rank, int k) const;  // the k-th chunk rank holds (k < per_rank())
  int source(int rank, int step) const { return ((rank - step) % G_ + G_) % G_; }  // whose shard
  // The pairs rank computes at step (none, when causal and the shard in hand lies after its chunks).
  std::vector<Pair> pairs(int rank, int step, bool causal) const;
  std::string text() const;  // "G=4 zigzag" / "G=4 ring"
  // The chunks' first rows, in sequence order: the query groups whose share of dK and dV the
  // backward rounds to the dtype apart (attention::BackwardReference's partial groups).
  std::vector<int> starts() const;

 private:
  int N_, G_;
  bool zigzag_;
  int c_;
};

// The shard a rank sends at each step: K and V of its per_rank() chunks, c rows each (padding
// rows travel too), B·H heads of d values of the dtype. Over the forward, G − 1 sends and G − 1
// receives of it per rank.
std::uint64_t shard_bytes(const Split& split, const Shape& s, course::Dtype t);
std::uint64_t forward_bytes_sent(const Split& split, const Shape& s, course::Dtype t);
// The backward: K and V travel as in the forward (G − 1 passes), and with them dK and dV, summed in
// float by every rank they visit, which take one pass more to come home (G passes, 4 bytes a value).
std::uint64_t gradient_shard_bytes(const Split& split, const Shape& s);
std::uint64_t backward_bytes_sent(const Split& split, const Shape& s, course::Dtype t);
// The score entries (query, key) a rank computes over the forward, padding rows included, as the
// kernels count them: c² per full pair, c·(c + 1)/2 per diagonal. Causal, the plain ring gives rank
// G − 1 about 2G − 1 times rank 0's; zigzag gives every rank the same.
double rank_scores(const Split& split, int rank, bool causal);

// The ring on the CPU: every rank's chunks of Q, and its K/V shard passed around G − 1 times; each
// pair computed in float as the kernels do (P̃ rounded to the dtype for P·V, the pair's O rounded
// to the dtype), the pairs merged by ⊕ in float, O rounded to the dtype at the end. Q, K, V:
// B·H·N·d values as stored (rounded to the dtype). Writes O (B·H·N·d) and L (B·H·N, natural log).
struct Traffic {
  std::vector<std::uint64_t> sent, received;  // bytes, per rank
};
// The same ring's passes without the arithmetic: the bytes each rank sends and receives.
Traffic ring_traffic(const Split& split, const Shape& s, course::Dtype t);
Traffic ring_forward_cpu(const Split& split, const Shape& s, course::Dtype t, const float* Q, const float* K,
                         const float* V, float* O, float* L);

// The backward on the CPU, as the GPU engine runs it: the forward above first (O, L), D = rowsum(dO ∘ O)
// from O rounded to the dtype; then at each step every rank's pairs (P recomputed from L, keys past
// a chunk's rows hidden), dQ summed in place in float, each pair's dK and dV rounded to the dtype (as
// the kernels write them) and added in float to the shard's sums, which travel one pass behind their
// shard and come home after G passes. dQ, dK, dV: B·H·N·d values, rounded to the dtype. Returns
// the bytes each rank sends and receives (forward and backward together).
Traffic ring_backward_cpu(const Split& split, const Shape& s, course::Dtype t, const float* Q, const float* K,
                          const float* V, const float* dO, float* dQ, float* dK, float* dV);

}  // namespace ring
