// The rungs of stage 08, in the order of the chapter, and its ablations (common/attention/variants.hpp:
// name, dtypes, head dimensions, one line, block sizes for the model and the CPU count, launcher).
// The forward variant of stage 06: the same problem, the same layout, the same launch signature.
#pragma once

#include <string>
#include <vector>

#include "attention/variants.hpp"

namespace attention {

// Rungs: wgmma, tma, warp_specialized, pingpong, overlap, persistent, three_warpgroups, tuned (fp16
// and bf16, d = 64 or 128). Ablations (run only when named with --variants): rung 5 without warp
// specialisation (the FA-3 paper's, overlap_no_ws), rung 8 in FA-3's LPT tile order (tuned_lpt), and
// the experiment tile_overlap. Launchers are empty unless the build has the sm_90a kernels
// (COURSE_HAS_HOPPER).
const Registry<ForwardVariant>& v3_registry();

// The bytes the copy engine delivers to shared memory for the TMA rungs: whole boxes of Q (Tr·Br
// rows) and of K and V (every visited key block's Bc rows), the rows past N included. TMA reads
// only the rows inside the tensor from L2; the rest it fills with zeros. The SMs' crossbar counter
// (l1tex__m_xbar2l1tex_read_bytes) counts the delivered bytes, L2's own sector count only the rows
// read (chapter 08). Equal to the model's reads when N is a multiple of the blocks.
double tma_delivered_read_bytes(const Shape& s, course::Dtype t, Tiles tiles);
// Whether a rung loads with TMA (all but the first, which loads with cp.async).
bool loads_with_tma(const std::string& variant);
// The traffic of the persistent kernels' tile counter (rungs 6-8, tuned_lpt, tile_overlap) on a grid
// of `blocks`: one atomicAdd a tile and one a block (the count of blocks done), a 32-byte sector
// read and written in L2 each (0 for the other rungs). The last block's reset, two 4-byte stores,
// is left out.
double tile_counter_bytes(const Shape& s, Tiles tiles, const std::string& variant, int blocks);

// Stage 06's last rung, run beside stage 08's on the same inputs: the yardstick of the same run.
constexpr const char* kStage06Rung = "lazy_rescale";

}  // namespace attention
