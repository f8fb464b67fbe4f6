"""The Hopper GEMM: configs (compiled set), heuristic, JAX primitive and public wrapper."""
