// The rows of stage 10 (common/attention/variants.hpp): one GPU on the whole sequence, then for each
// layout (ring: a chunk a rank; zigzag: chunks r and 2G − 1 − r) the ring over NCCL, its compute and
// its transfers alone, the shards pulled by the copy engines, the ranks on one GPU, and forward +
// backward over NCCL and on one GPU. All run by default (--layouts picks the layouts).
#pragma once

#include "attention/variants.hpp"
#include "engine.hpp"  // ring::Transport, ring::Part (declarations only)

namespace attention {

struct RingVariant : VariantInfo {
  bool single = false;  // one GPU, the whole sequence (stage 08's last rung; _fb: and stage 07's backward)
  bool zigzag = false;
  ring::Transport transport = ring::Transport::nccl;
  ring::Part part = ring::Part::all;
  bool fb = false;  // forward + backward
  const char* layout() const { return single ? "single" : zigzag ? "zigzag" : "ring"; }
};

const Registry<RingVariant>& ring_registry();

}  // namespace attention
