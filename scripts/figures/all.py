"""Makes every concept figure in docs/figures/: python3 scripts/figures/all.py"""
import bwd_dataflow
import bwd_hopper_ladder
import causal_blocks
import exp_from_bits
import fp8_key_order
import fp8_wide_smem
import hadamard_butterflies
import tma_box
import wgmma_accumulator
import climb
import fa3_pingpong
import fp8_ladder
import fa3_pipeline
import fp8_error_vs_outliers
import loop_orders
import matmul_tiling
import memory_hierarchy
import mma_fragments
import ring_scaling
import ring_schedule
import split_k_vs_split_q
import swizzle

if __name__ == "__main__":
    memory_hierarchy.main()
    matmul_tiling.main()
    loop_orders.main()
    split_k_vs_split_q.main()
    mma_fragments.fragments()
    mma_fragments.s_to_p()
    swizzle.main()
    fa3_pipeline.main()
    fa3_pingpong.main()
    ring_schedule.main()
    ring_scaling.main()
    fp8_error_vs_outliers.main()
    climb.main()
    fp8_ladder.main()
    bwd_dataflow.main()
    bwd_hopper_ladder.main()
    causal_blocks.main()
    wgmma_accumulator.main()
    tma_box.main()
    hadamard_butterflies.main()
    fp8_key_order.main()
    fp8_wide_smem.main()
    exp_from_bits.main()
