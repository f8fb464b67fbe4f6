"""Decoding: the projections of examples/transformer_layer.py's block run token step by token
step in a lax.scan, at batch 1, 8, 32 and 128, with jax_hopper against jnp.

    python examples/decode.py [--steps 128] [--batches 1 8 32 128] [--reps 5]

One step takes the batch's current hidden states (batch, d_model) through the block's four
projections: x += W_o (RMSNorm(x) W_qkv)[:, :d] (the attention in between is left out: at decode
it reads the KV cache, not the weights), then x += W_down swiglu(RMSNorm(x) W_gate_up). Each
step reads every weight once: decode is a weight read, bound by HBM bandwidth; the table gives
tokens/s of both versions and the weight bytes per second jax_hopper reaches. The two versions'
final states are compared (relative Frobenius difference, bound bound(steps)); exit status 1 if
above.
Without the kernels it runs small and both versions are XLA.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_layer as block  # noqa: E402

import jax_hopper  # noqa: E402



def bound(steps: int) -> float:
    """The versions round differently (jax_hopper adds each residual in fp32 before its one
    rounding, jnp rounds the product first) and the residual stream carries every step's
    difference on: measured ~9e-3 after 16 steps and 2.5-3e-2 after 128 (CPU, d_model 256), a
    random walk's sqrt(steps). 5e-3 sqrt(steps) leaves about twice that; a wrong projection
    differs by O(1) within a step."""
    return 5e-3 * steps ** 0.5


def make_decode(dense, swiglu, steps):
    """jit((params, x0) -> x after `steps` decode steps), one lax.scan."""
    def step(p, x):
        d = x.shape[-1]
        q = dense(block.rms_norm(x, p["ln1"]), p["w_qkv"])[:, :d]  # stands in for attention
        x = dense(q, p["w_o"], residual=x)
        return dense(swiglu(block.rms_norm(x, p["ln2"]), p["w_gate_up"]), p["w_down"],
                     residual=x)

    @jax.jit
    def decode(p, x):
        return jax.lax.scan(lambda x, _: (step(p, x), None), x, None, length=steps)[0]
    return decode


def main(argv=None) -> int:
    kernels = jax_hopper.kernels_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--d-model", type=int, default=4096 if kernels else 256)
    parser.add_argument("--d-ff", type=int, default=14336 if kernels else 512)
    args = parser.parse_args(argv)
    print(f"device: {jax.devices()[0].device_kind}; kernels: {kernels.reason}")
    params = block.init_params(jax.random.key(0), args.d_model, args.d_ff)
    weight_bytes = sum(v.size * v.dtype.itemsize for k, v in params.items() if k.startswith("w"))
    versions = {
        "jax_hopper": make_decode(block.hopper_dense, block.hopper_swiglu, args.steps),
        "jnp": make_decode(block.jnp_dense, block.swiglu_from(block.jnp_dense), args.steps),
    }
    print(f"d_model {args.d_model}, d_ff {args.d_ff}, {args.steps} steps, bf16; weights "
          f"{weight_bytes / 1e6:.0f} MB read per step")
    print(f"{'batch':>6}{'jax_hopper tok/s':>18}{'jnp tok/s':>12}"
          + (f"{'ratio':>8}{'weights GB/s':>14}" if kernels else "") + f"{'difference':>12}")
    ok = True
    for batch in args.batches:
        x0 = jax.random.normal(jax.random.key(batch), (batch, args.d_model),
                               jnp.float32).astype(jnp.bfloat16)
        outs = {name: f(params, x0) for name, f in versions.items()}
        diff = float(block.rel_fro(outs["jax_hopper"], outs["jnp"]))
        ok &= diff <= bound(args.steps)
        secs = block.median_seconds({n: (lambda f=f: f(params, x0)) for n, f in versions.items()},
                                    args.reps)
        tps = {n: batch * args.steps / s for n, s in secs.items()}
        extra = (f"{tps['jax_hopper'] / tps['jnp']:8.2f}"
                 f"{weight_bytes * args.steps / secs['jax_hopper'] / 1e9:14.0f}") if kernels else ""
        print(f"{batch:>6}{tps['jax_hopper']:18.4g}{tps['jnp']:12.4g}{extra}{diff:12.2e}")
    if not kernels:
        print("(no kernels here: both versions are XLA, so no ratio is shown)")
    print(f"numerical check: {'passed' if ok else 'FAILED'} (bound {bound(args.steps):.2g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
