// 07_backward: FlashAttention's backward pass with recompute, in fp32 on the CUDA cores and on the
// tensor cores in fp16 and bf16 (atomic and deterministic dQ), beside standard attention's
// (program.cpp runs it). docs/07_backward.md explains.
#include "program.hpp"

int main(int argc, char** argv) {
  return attention::run_backward_program(
      {"07_backward", "FlashAttention's backward pass with recompute, fp32 and tensor cores (fp16, bf16)",
       attention::bwd_registry()},
      argc, argv);
}
