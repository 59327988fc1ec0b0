#include "variants.hpp"

namespace attention {

const Registry<RingVariant>& ring_registry() {
  using ring::Part;
  using ring::Transport;
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const std::vector<int> ds = {64, 128};
  static const Registry<RingVariant> registry("10", [] {
    std::vector<RingVariant> v = {
        {{"single", half, ds, "stage 08's last rung on the whole sequence, one GPU: the ideal's yardstick"}, true},
        {{"single_fb", half, ds, "single's forward and stage 07's fastest backward, one GPU"},
         true, false, Transport::copies, Part::all, true},
    };
    for (const bool zigzag : {false, true}) {
      const std::string l = zigzag ? "zigzag" : "ring";
      const std::string what = zigzag ? "zigzag (chunks r and 2G - 1 - r a rank)" : "ring (a chunk a rank)";
      v.push_back({{l, half, ds, what + " over NCCL, one GPU a rank"}, false, zigzag});
      v.push_back({{l + "_compute", half, ds, l + " with no transfers: its compute time"},
                   false, zigzag, Transport::nccl, Part::compute});
      v.push_back({{l + "_transfers", half, ds, l + "'s transfers alone"}, false, zigzag, Transport::nccl, Part::transfers});
      v.push_back({{l + "_peer", half, ds, l + " with the shards pulled by the copy engines (cudaMemcpyPeerAsync)"},
                   false, zigzag, Transport::peer});
      v.push_back({{l + "_copies", half, ds, l + " with its ranks on one GPU (--virtual-ranks)"},
                   false, zigzag, Transport::copies});
      v.push_back({{l + "_fb", half, ds, l + ", forward + backward over NCCL"}, false, zigzag, Transport::nccl, Part::all, true});
      v.push_back({{l + "_fb_copies", half, ds, l + ", forward + backward, its ranks on one GPU"},
                   false, zigzag, Transport::copies, Part::all, true});
    }
    return v;
  }());
  return registry;
}

}  // namespace attention
