"""A Mixture-of-Experts feed-forward block on jax_hopper's grouped GEMMs (hopper_ragged_glu and
ragged_dot), against the same block on jax.lax.ragged_dot: forward and training step timed
side by side, both checked against the block in float32.

    python examples/moe_layer.py [--tokens 4096] [--d-model 4096] [--d-ff 14336]
                                 [--experts 8] [--top-k 2] [--reps 5]
                                 [--fp8 tensor|delayed|block]

The block: a router (softmax over experts, top-k, weights renormalised), the token copies
sorted by expert, every expert's gate and up projections and SwiGLU in one launch
(hopper_ragged_glu; the lax version: one grouped GEMM into (rows, 2F), SwiGLU in jnp), one
grouped GEMM for the down projections, then the copies unsorted and combined with their
router weights, plus the residual. The group sizes come from the router on the device: nothing
is synchronised with the host. bf16 weights and activations, float32 accumulation. Defaults
are Mixtral-8x7B's expert sizes; without the kernels it runs small, both versions are XLA, and
it says so. Exit status 1 if a version's output differs from float32 by more than the bound.
--fp8 RECIPE adds a third version, every grouped product through fp8_ragged_dot(rows, w,
sizes, recipe=RECIPE) (gate and up as one product into (rows, 2F), SwiGLU in jnp): the
forward, d lhs and weight-gradient products all in fp8; its check has fp8's bound. And a
fourth, forward only: serving, the expert weights quantized once beforehand
(quantize_experts), so each call quantizes only the tokens. With "delayed" each of the two call
sites has an Fp8Meta (fp8_meta(16, experts=E)) in the parameters under "fp8_meta", calibrated by two
passes before anything is checked or timed, which the training step replaces by its gradient
instead of updating it (fp8_matmul's rule): the scales come from amax histories, so no
quantize pass reads its tensor twice.

NOTES: in the training step the jax_hopper version's weight gradients run on the grouped
contraction kernel (hopper_ragged_contract) and its GLU forward unfused (the backward needs gate
and up: hopper_ragged_glu's notes); the lax version's through jax.lax.ragged_dot's transpose.
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

F32 = jnp.float32
# bf16 rounds each version's activations, products and output where float32 does not: the
# experts' output differs by ~5e-3 (CPU, 64-512 tokens, 4-16 experts); a wrong expert or a
# dropped group differs by O(1).
BOUND = 2e-2
# The fp8 version's products each carry e4m3's rounding of both operands (~4% relative, as
# fp8_matmul's); two in a row through SwiGLU gave 6.4-6.8e-2 (CPU, 64-512 tokens, 4-16
# experts, both recipes). A wrong expert still differs by O(1).
FP8_BOUND = 1.5e-1


def init_params(key, d_model, d_ff, experts, dtype=jnp.bfloat16):
    k1, k2, k3 = jax.random.split(key, 3)

    def w(k, *shape):
        return (jax.random.normal(k, shape, F32) / shape[-2] ** 0.5).astype(dtype)
    return dict(router=w(k1, d_model, experts), w_gate_up=w(k2, experts, d_model, 2 * d_ff),
                w_down=w(k3, experts, d_ff, d_model))


# The grouped products' weights, one Fp8Meta each under recipe "delayed".
PROJECTIONS = ("w_gate_up", "w_down")


def make_block(ragged, top_k, glu=None):
    """(params, x (T, d)) -> x + MoE(x), with `ragged` as the grouped GEMM (lhs, rhs, sizes) and
    `glu` (lhs, w (E, d, 2, F), sizes) -> SwiGLU as the gated one (None: ragged, then jnp).
    Where params hold "fp8_meta" (recipe "delayed"), ragged also takes meta=."""
    def moe(p, x):
        metas = p.get("fp8_meta")
        meta = (lambda name: {}) if metas is None else (lambda name: {"meta": metas[name]})
        tokens, experts = x.shape[0], p["router"].shape[1]
        probs = jax.nn.softmax(jnp.dot(x, p["router"], preferred_element_type=F32))
        weights, chosen = jax.lax.top_k(probs, top_k)
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
        flat = chosen.reshape(-1)
        order = jnp.argsort(flat, stable=True)  # token copies sorted by expert
        sizes = jnp.bincount(flat, length=experts).astype(jnp.int32)
        rows = x[order // top_k]
        if glu is None:
            gate, up = jnp.split(ragged(rows, p["w_gate_up"], sizes, **meta("w_gate_up")
                                        ).astype(F32), 2, axis=-1)
            a = (jax.nn.silu(gate) * up).astype(x.dtype)
        else:  # (E, d, 2F) [gate | up] is (E, d, 2, F) in memory
            w = p["w_gate_up"]
            a = glu(rows, w.reshape(*w.shape[:2], 2, w.shape[2] // 2), sizes)
        y = ragged(a, p["w_down"], sizes, **meta("w_down"))
        y = jnp.zeros_like(y).at[order].set(y).reshape(tokens, top_k, -1)
        out = jnp.einsum("tkd,tk->td", y.astype(F32), weights)
        return (x.astype(F32) + out).astype(x.dtype)
    return moe


def lax_ragged(lhs, rhs, sizes):
    return jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=lhs.dtype)


def make_train_step(moe, lr=1e-2):
    def loss(p, x, target):
        return jnp.mean(jnp.square(moe(p, x).astype(F32) - target))

    @jax.jit
    def step(p, x, target):
        value, grads = jax.value_and_grad(loss)(p, x, target)
        metas = grads.pop("fp8_meta", None)  # an Fp8Meta's gradient is its next value
        weights = {k: w for k, w in p.items() if k != "fp8_meta"}
        p = jax.tree.map(lambda w, g: (w.astype(F32) - lr * g).astype(w.dtype), weights, grads)
        return (p if metas is None else p | {"fp8_meta": metas}), value
    return step


def with_calibrated_metas(moe, params, x, target):
    """params with an Fp8Meta per projection whose histories hold amaxes of a forward and
    backward pass. A fresh history scales by 1, which flushes small gradients to zero in e5m2,
    so a pass records the right dy amax only behind projections already calibrated: one pass
    per projection on the gradient's path (two)."""
    experts = params["router"].shape[1]
    p = params | {"fp8_meta": {name: jax_hopper.fp8_meta(16, experts=experts)
                               for name in PROJECTIONS}}
    grad = jax.jit(jax.grad(lambda p, x, t: jnp.mean(jnp.square(moe(p, x).astype(F32) - t))))
    for _ in PROJECTIONS:
        p = p | {"fp8_meta": grad(p, x, target)["fp8_meta"]}
    return p


def main(argv=None) -> int:
    kernels = jax_hopper.kernels_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096 if kernels else 64)
    parser.add_argument("--d-model", type=int, default=4096 if kernels else 64)
    parser.add_argument("--d-ff", type=int, default=14336 if kernels else 128)
    parser.add_argument("--experts", type=int, default=8 if kernels else 4)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--fp8", choices=("tensor", "delayed", "block"), default=None,
                        help="add the block on fp8_ragged_dot with this recipe")
    args = parser.parse_args(argv)
    print(f"device: {jax.devices()[0].device_kind}; kernels: {kernels.reason}")
    print(f"{args.tokens} tokens, d_model {args.d_model}, d_ff {args.d_ff}, {args.experts} "
          f"experts, top-{args.top_k}, bf16")
    params = init_params(jax.random.key(0), args.d_model, args.d_ff, args.experts)
    x = jax.random.normal(jax.random.key(1), (args.tokens, args.d_model), F32
                          ).astype(jnp.bfloat16)
    target = jax.random.normal(jax.random.key(2), x.shape, F32)

    versions = {"jax_hopper": make_block(jax_hopper.ragged_dot, args.top_k,
                                         glu=jax_hopper.hopper_ragged_glu),
                "lax": make_block(lax_ragged, args.top_k)}
    start = {name: params for name in ("jax_hopper", "lax")}
    if args.fp8:
        versions["fp8"] = make_block(
            lambda lhs, rhs, sizes, **meta: jax_hopper.fp8_ragged_dot(lhs, rhs, sizes,
                                                                      recipe=args.fp8, **meta),
            args.top_k)
        start["fp8"] = (with_calibrated_metas(versions["fp8"], params, x, target)
                        if args.fp8 == "delayed" else params)
        versions["fp8 serve"] = versions["fp8"]  # the same block, on weights quantized once
        start["fp8 serve"] = jax.jit(lambda p: p | {
            name: jax_hopper.quantize_experts(p[name], recipe=args.fp8)
            for name in PROJECTIONS})(params)
    exact = make_block(lambda l, r, s: jax.lax.ragged_dot(l.astype(F32), r.astype(F32), s),
                       args.top_k)(jax.tree.map(lambda w: w.astype(F32), params), x.astype(F32))
    ok = True
    for name, moe in versions.items():
        # The experts' contribution (the block's output less its input): what a wrong expert
        # or a dropped group would change.
        diff = block.rel_fro(jax.jit(moe)(start[name], x).astype(F32) - x, exact - x)
        bound = FP8_BOUND if name.startswith("fp8") else BOUND
        ok &= diff <= bound
        print(f"{name:>10}: experts' output vs float32 {diff:.2e} (bound {bound:g})")

    forward = {n: (lambda f=jax.jit(m), n=n: f(start[n], x)) for n, m in versions.items()}
    steps = {n: make_train_step(m) for n, m in versions.items() if n != "fp8 serve"}
    train = {n: (lambda s=s, n=n: s(start[n], x, target)) for n, s in steps.items()}
    fwd_s = block.median_seconds(forward, args.reps)
    train_s = block.median_seconds(train, args.reps)
    print(f"{'':>10} {'forward ms':>11} {'train step ms':>14}")
    for name in versions:
        step_ms = f"{train_s[name] * 1e3:14.3f}" if name in train_s else f"{'-':>14}"
        print(f"{name:>10} {fwd_s[name] * 1e3:11.3f} {step_ms}")
    if kernels:
        print(f"jax_hopper over lax speed-up: forward {fwd_s['lax'] / fwd_s['jax_hopper']:.2f}x, "
              f"train step {train_s['lax'] / train_s['jax_hopper']:.2f}x")
        if args.fp8:
            print(f"fp8 ({args.fp8}) over lax: forward {fwd_s['lax'] / fwd_s['fp8']:.2f}x, "
                  f"train step {train_s['lax'] / train_s['fp8']:.2f}x; over jax_hopper bf16: "
                  f"{fwd_s['jax_hopper'] / fwd_s['fp8']:.2f}x, "
                  f"{train_s['jax_hopper'] / train_s['fp8']:.2f}x")
            print(f"fp8 serving (weights quantized once) forward over jax_hopper bf16: "
                  f"{fwd_s['jax_hopper'] / fwd_s['fp8 serve']:.2f}x, over lax: "
                  f"{fwd_s['lax'] / fwd_s['fp8 serve']:.2f}x")
    else:
        print("(no kernels here: both versions are XLA, so no speed-up is shown)")
    print(f"numerical check: {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
