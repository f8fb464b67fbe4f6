"""jax-hopper: hand-written NVIDIA Hopper (sm_90a) TMA + wgmma kernels as jittable JAX functions.

    from jax_hopper import hopper_matmul
    y = jax.jit(hopper_matmul)(a, b)          # bf16/fp16 in, fp32 accumulation
    h = hopper_glu(x, w_gate_up)              # silu(x @ w[:, 0]) * (x @ w[:, 1]), fused
    y = hopper_ragged_dot(x, w_experts, group_sizes)  # MoE grouped GEMM, sizes on the device
    dw = hopper_ragged_contract(x, dy, group_sizes)   # its weight gradient, (G, K, N)
    h = hopper_ragged_glu(x, w_gate_up, group_sizes)  # experts' SwiGLU, w (G, K, 2, F)
    y = hopper_fp8_matmul(a8, b8, a_scale, b_scale)   # fp8 (N, K) weight, per-tensor scales
    xq = quantize_fp8(x, scaling="block")             # fp8 + scales (+ transposed copy)
    b8 = transpose_fp8(b8_kn)                         # an fp8 (K, N) weight as (N, K)
    y = fp8_matmul(x, w, recipe="block")              # differentiable, fp8 forward and backward
    y = fp8_matmul(x, w, recipe="delayed", meta=m)    # scales from amax histories, m = fp8_meta()
    y = fp8_matmul(x, quantize_weight(w))             # serving: the weight quantized once
    y = hopper_ragged_fp8_dot(x8, w8, group_sizes, x_scale, w_scales)  # fp8 MoE grouped GEMM
    dw = hopper_ragged_fp8_contract(x8_t, dy8_t, group_sizes, x_scale, dy_scale)  # its wgrad
    y = fp8_ragged_dot(x, w_experts, group_sizes, recipe="block")  # differentiable, fp8 inside
    y = fp8_ragged_dot(x, quantize_experts(w_experts), group_sizes)  # serving: w quantized once

On a machine without a Hopper GPU (or in a package built without the CUDA toolkit) every op
lowers to a pure-JAX reference with the same result; kernels_available() says which runs.
"""

from jax_hopper import _ffi, layout
from jax_hopper._ffi import KernelStatus, kernels_available
from jax_hopper.gemm.api import hopper_matmul
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.dot_general import dot_general
from jax_hopper.gemm.fp8 import hopper_fp8_matmul
from jax_hopper.gemm.fp8_matmul import fp8_dot_general, fp8_matmul, quantize_weight
from jax_hopper.gemm.fp8_meta import Fp8Meta, fp8_meta, read_histories
from jax_hopper.gemm.fp8_ragged_dot import fp8_ragged_dot, quantize_experts
from jax_hopper.gemm.glu import hopper_glu
from jax_hopper.gemm.ragged import hopper_ragged_dot, ragged_dot
from jax_hopper.gemm.ragged_contract import hopper_ragged_contract
from jax_hopper.gemm.ragged_fp8 import hopper_ragged_fp8_dot
from jax_hopper.gemm.ragged_fp8_contract import hopper_ragged_fp8_contract
from jax_hopper.gemm.ragged_glu import hopper_ragged_glu
from jax_hopper.quantize.fp8 import Fp8Array, dequantize_fp8, quantize_fp8
from jax_hopper.quantize.transpose import transpose_fp8
from jax_hopper.tma.ops import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes

_ffi.register_targets()

__all__ = [
    "Fp8Array",
    "Fp8Meta",
    "read_histories",
    "GemmConfig",
    "KernelStatus",
    "dequantize_fp8",
    "dot_general",
    "fp8_dot_general",
    "fp8_matmul",
    "fp8_meta",
    "fp8_ragged_dot",
    "hopper_fp8_matmul",
    "hopper_glu",
    "hopper_matmul",
    "hopper_ragged_contract",
    "hopper_ragged_glu",
    "hopper_ragged_dot",
    "hopper_ragged_fp8_contract",
    "hopper_ragged_fp8_dot",
    "kernels_available",
    "layout",
    "quantize_experts",
    "quantize_fp8",
    "quantize_weight",
    "ragged_dot",
    "tma_copy",
    "tma_multicast",
    "tma_reduce_add",
    "tma_smem_bytes",
    "transpose_fp8",
]
__version__ = "0.1.0"
