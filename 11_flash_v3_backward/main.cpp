// 11_flash_v3_backward: FlashAttention's backward pass on Hopper (wgmma), fp16 and bf16, beside stage
// 07's fastest on the same inputs; stage 07's program runs it (07_backward/program.cpp), with its
// model, CPU count, checks against float64 and counters.
#include "../07_backward/program.hpp"
#include "../08_flash_v3/variants.hpp"
#include "variants.hpp"

int main(int argc, char** argv) {
  // O and L (and --with-forward's forward) from stage 08's last rung: FlashAttention-3's forward
  // and backward together. A build without the sm_90a kernels keeps stage 06's.
  const attention::ForwardVariant& fa3 = attention::v3_registry().find("tuned");
  return attention::run_backward_program({"11_flash_v3_backward", "FlashAttention's backward pass on Hopper (wgmma)",
                                          attention::v3_bwd_registry(), attention::stage07_beside(),
                                          fa3.launch ? &fa3 : nullptr},
                                         argc, argv);
}
