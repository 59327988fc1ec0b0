// 11_flash_v3_backward: FlashAttention's backward pass on Hopper (wgmma), fp16 and bf16, beside stage
// 07's fastest on the same inputs; stage 07's program runs it (07_backward/program.cpp), with its
// model, CPU count, checks against float64 and counters.
#include "../07_backward/program.hpp"
#include "variants.hpp"

int main(int argc, char** argv) {
  return attention::run_backward_program({"11_flash_v3_backward", "FlashAttention's backward pass on Hopper (wgmma)",
                                          attention::v3_bwd_registry(), attention::stage07_beside()},
                                         argc, argv);
}
