"""A/B of a change: two builds of jax_hopper timed side by side in one process, with XLA.

    bash scripts/install_baseline.sh REV DIR     # the build before the change, as jax_hopper_base
    PYTHONPATH=DIR python benchmarks/bench_ab.py [--reps 7] [--out-dir D] [--tag T]

Cases: every shape of bench_gemm.py (bf16 hopper_matmul, default config; or --shapes, with
--config's GemmConfig fields for both builds where given, e.g. an opt-in schedule), every
case of bench_epilogue.py (the fused call; or --epilogue-cases), the gated units named by
--glu-cases (hopper_glu of a bf16 (M, K) and a (K, N) weight, N its gate's and up's columns,
against swiglu on jnp.dot), hopper_matmul's training steps named by --grad-cases (MxNxK), the
bench_grouped.py cases named by --grouped-cases (hopper_ragged_dot against jax.lax.ragged_dot,
uniform routing), the training steps (the gradients in x and w) of hopper_glu named by
--glu-grad-cases and of hopper_ragged_glu on the bench_grouped cases named by
--grouped-glu-grad-cases (against the same units in jnp and jax.lax.ragged_dot; rated as their
three products; a linear unit's step as two, LINEAR_STEP_PRODUCTS), the same on e4m3 copies
named by --grouped-fp8-cases (hopper_ragged_fp8_dot per tensor against jax.lax.ragged_dot on
the same fp8 operands), the fp8 shapes named by --fp8-cases
(hopper_fp8_matmul with --fp8-scaling's scales, default config, against bench_fp8.py's peer:
XLA's fp8 dot per tensor, the dequantise-then-bf16 dot per block), the quantizations named by
--quantize-cases (RxC:MODE, a bench_quantize.py mode: quantize_fp8 of a bf16 (R, C) array
against the same in jnp; the rate is GB/s of bench_quantize's traffic, not TFLOP/s), and the
vmapped products named by --vmap-cases (VxMxNxK: jax.vmap over V entries of (M, K) against one
shared (K, N) weight, e.g. a decode step per sequence; a model's step over them, hopper_matmul's
or hopper_glu's: --vmap-train-cases, --glu-vmap-train-cases) and the vmapped grouped products
named by --grouped-vmap-cases (ExMxGxKxN: hopper_ragged_dot over E entries, each routing its M
rows to the G experts they share), with their per-entry gradients (--grouped-vmap-grad-cases) or a
model's step over them (--grouped-vmap-train-cases: one gradient of the shared experts; the
same over hopper_ragged_glu: --grouped-glu-vmap-train-cases).
Per case base and new are timed interleaved (timing.time_interleaved), then the peer (xla)
alone: a peer between them would favour whichever runs right after it where the peer draws
little power (XLA's ragged_dot; timing.time_interleaved's NOTES). Inputs rotate over sets
larger than L2; each result is checked against an fp32-accumulated reference (a quantization:
its dequantised copies against jnp's). The summary gives new/base per case, the geomean and the
worst; the JSON (ab_<tag>.json) keeps every time. --device-time adds each build's device
time per call (timing.device_times: short chained calls are bound by the host) and its ratio,
and XLA's (traced apart, as its chained time) with new/XLA.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import bench_epilogue
import bench_fp8
import bench_gemm
import bench_grouped
import bench_quantize
import numpy as np
import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
import jax_hopper_base  # noqa: E402  (scripts/install_baseline.sh)

ERR_LIMIT = 1e-2


def matmul(jh, config: dict | None):
    """jh's hopper_matmul, with GemmConfig(**config) where config is given."""
    if not config:
        return jh.hopper_matmul
    cfg = jh.GemmConfig(**config)
    return lambda a, b: jh.hopper_matmul(a, b, config=cfg)


def cases(shapes, epilogue_cases, glu_shapes=(), config=None):
    """name -> (shape, {variant: f(a, b)}, reference(a, b)); config: GemmConfig fields of both
    builds' plain GEMMs (None: the default config)."""
    out = {}
    dot32 = lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)  # noqa: E731
    for shape in shapes:
        out[bench_gemm.shape_name(shape)] = (shape, {
            "xla": jnp.dot, "base": matmul(jax_hopper_base, config),
            "new": matmul(jax_hopper, config)}, dot32)
    # The gated unit: b (K, 2F) is the gate's F columns, then the up projection's.
    glu = lambda jh: lambda a, b: jh.hopper_glu(a, b.reshape(b.shape[0], 2, -1))  # noqa: E731
    for shape in glu_shapes:
        out[f"glu_{bench_gemm.shape_name(shape)}"] = (shape, {
            "xla": lambda a, b: bench_epilogue.swiglu(jnp.dot(a, b), None),
            "base": glu(jax_hopper_base), "new": glu(jax_hopper)},
            lambda a, b: bench_epilogue.swiglu(dot32(a, b), None))
    key = jax.random.key(1)
    for i, name in enumerate(epilogue_cases):
        shape, epilogue, fused = bench_epilogue.CASES[name]
        e = bench_epilogue.case_extra(name, jax.random.fold_in(key, i), shape[0], shape[1])
        e32 = {k: v.astype(jnp.float32) for k, v in e.items()}
        out[name] = (shape, {
            "xla": lambda a, b, ep=epilogue, e=e: ep(jnp.dot(a, b), e),
            "base": lambda a, b, f=fused, e=e: f(jax_hopper_base, a, b, e),
            "new": lambda a, b, f=fused, e=e: f(jax_hopper, a, b, e)},
            lambda a, b, ep=epilogue, e=e32: ep(dot32(a, b), e))
    return out


def grouped_case(name: str, key):
    """(shape, pairs, {variant: f(a, rhs)}, reference) of bench_grouped case `name`: a is
    (lhs, sizes), sizes drawn uniformly (seeded), two sets of operands."""
    m, groups, k, n = bench_grouped.CASES[name]
    sizes = bench_grouped.group_sizes(np.random.default_rng(0), m, groups, "uniform")
    sets = bench_grouped.operand_sets(key, m, groups, k, n, sizes)
    variants = {"xla": lambda a, r: jax.lax.ragged_dot(a[0], r, a[1]),
                "base": lambda a, r: jax_hopper_base.hopper_ragged_dot(a[0], r, a[1]),
                "new": lambda a, r: jax_hopper.hopper_ragged_dot(a[0], r, a[1])}
    reference = lambda a, r: jax.lax.ragged_dot(a[0], r, a[1],  # noqa: E731
                                                preferred_element_type=jnp.float32)
    return (m, n, k), timing.rotation(sets, 5), variants, reference


def grouped_fp8_case(name: str, key):
    """grouped_case on e4m3 copies (bench_grouped.fp8_sets): hopper_ragged_fp8_dot per tensor
    (one scale per expert), against lax.ragged_dot on the same fp8 operands."""
    (m, n, k), pairs, _, _ = grouped_case(name, key)
    sets = bench_grouped.fp8_sets([pairs[0], pairs[1]], k)
    one = jnp.float32(1)
    variants = {"xla": bench_grouped.fp8_variants()["xla_fp8"],
                "base": lambda a, r: jax_hopper_base.hopper_ragged_fp8_dot(a[0], r[0], a[1], one,
                                                                           r[2]),
                "new": lambda a, r: jax_hopper.hopper_ragged_fp8_dot(a[0], r[0], a[1], one, r[2])}
    reference = lambda a, r: (jax.lax.ragged_dot(  # noqa: E731
        a[0], r[1], a[1], preferred_element_type=jnp.float32) * r[2][0])
    return (m, n, k), timing.rotation(sets, 5), variants, reference


def training_step(unit, needs_forward: bool = False):
    """(a, b) -> the gradients of step_loss(unit(a, b)) in a and b: a training step's backward
    products (and the forward they need), one output per operand."""
    return jax.grad(lambda a, b: step_loss(unit(a, b), needs_forward), (0, 1))


def step_loss(y, needs_forward: bool = False):
    """sum(y), whose cotangent does not depend on y, so jit drops a linear unit's forward; or,
    needs_forward, 0.5 * sum(y^2), whose cotangent is y: the forward runs, as under a model's
    next layer (a fused activation's step: FUSED_STEP_PRODUCTS)."""
    y = y.astype(jnp.float32)
    return 0.5 * jnp.sum(y * y) if needs_forward else jnp.sum(y)


# A linear unit's training step of sum(unit(a, b)) is two products (d lhs, d rhs): the sum's
# cotangent does not depend on the forward's output, so jit drops the forward (a GLU's step
# needs its forward: three). Rated as three, the Mixtral step read 1103 TFLOP/s on the H100,
# past its 989 peak.
LINEAR_STEP_PRODUCTS = 2


# A fused activation's step: the forward (whose z act'(z) needs, and whose y the loss's
# cotangent is: step_loss's needs_forward) and the two gradients, three products.
FUSED_STEP_PRODUCTS = 3


def bias_gelu_units(key, n):
    """{variant: unit(a, b)} of a bias + tanh-GELU linear layer: hopper_matmul's fused
    epilogue (its custom JVP) in this tree and the base, jnp.dot's in XLA, and the float32
    reference; one random bias (N,)."""
    bias = jax.random.normal(key, (n,), jnp.float32).astype(jnp.bfloat16)

    def hopper(jh):
        return lambda a, b: jh.hopper_matmul(a, b, bias=bias, activation="gelu_tanh")

    variants = {"xla": lambda a, b: bench_epilogue.gelu_bias(jnp.dot(a, b), bias),
                "base": hopper(jax_hopper_base), "new": hopper(jax_hopper)}
    reference = lambda a, b: bench_epilogue.gelu_bias(  # noqa: E731
        jnp.dot(a, b, preferred_element_type=jnp.float32), bias.astype(jnp.float32))
    return variants, reference


def plain_units():
    """{variant: unit(a, b)} of the plain product (hopper_matmul here and in the base,
    jnp.dot in XLA), and the float32 reference."""
    units = {"xla": jnp.dot, "base": jax_hopper_base.hopper_matmul,
             "new": jax_hopper.hopper_matmul}
    return units, lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)


def grad_case(shape, key, fused: bool = False):
    """(shape, pairs, {variant: step(a, b)}, reference, check) of hopper_matmul's training step
    on a bf16 (M, K) and (K, N), against jnp.dot's: nothing fused (the plain product's
    primitive), or with fused a bias and tanh-GELU (bias_gelu_units); shape is that of the
    products it amounts to (LINEAR_STEP_PRODUCTS or FUSED_STEP_PRODUCTS M, N, K)."""
    m, n, k = shape
    products = FUSED_STEP_PRODUCTS if fused else LINEAR_STEP_PRODUCTS
    n_calls, n_sets = timing.call_plan(products * m, n, k)
    sets = timing.rotating_sets(key, m, n, k, n_sets)
    units, reference = bias_gelu_units(jax.random.fold_in(key, 1), n) if fused else plain_units()
    return ((products * m, n, k), timing.rotation(sets, n_calls),
            {v: training_step(u, fused) for v, u in units.items()},
            training_step(reference, fused), worst_error)


def glu_grad_case(shape, key):
    """(shape, pairs, {variant: step(a, b)}, reference, check) of hopper_glu's training step
    on a bf16 (M, K) and a (K, N) weight (N: the gate's and up's columns), against swiglu on
    jnp.dot's; shape is that of the three products it amounts to (3M, N, K)."""
    m, n, k = shape
    n_calls, n_sets = timing.call_plan(3 * m, n, k)
    sets = timing.rotating_sets(key, m, n, k, n_sets)
    glu = lambda jh: lambda a, b: jh.hopper_glu(a, b.reshape(k, 2, -1))  # noqa: E731
    variants = {"xla": training_step(lambda a, b: bench_epilogue.swiglu(jnp.dot(a, b), None)),
                "base": training_step(glu(jax_hopper_base)),
                "new": training_step(glu(jax_hopper))}
    reference = training_step(lambda a, b: bench_epilogue.swiglu(jnp.dot(
        a, b, preferred_element_type=jnp.float32), None))
    return (3 * m, n, k), timing.rotation(sets, n_calls), variants, reference, worst_error


def expert_bias_rows(bias, sizes, m: int, dtype):
    """Each of m rows sorted by expert takes its expert's row of bias (G, N), in jnp: the
    peer's per-expert bias (uniform routing: no row past every group)."""
    return jnp.repeat(bias, sizes, axis=0, total_repeat_length=m).astype(dtype)


def grouped_grad_case(name: str, key, fused: bool = False):
    """grouped_case's training step: hopper_ragged_dot's gradients in lhs and rhs (uniform
    routing), against jax.grad of jax.lax.ragged_dot; fused: with a per-expert bias and
    tanh-GELU fused, against the same in jnp (FUSED_STEP_PRODUCTS)."""
    (m, n, k), pairs, variants, reference = grouped_case(name, key)
    if fused:
        groups = bench_grouped.CASES[name][1]
        bias = jax.random.normal(jax.random.fold_in(key, 1), (groups, n),
                                 jnp.float32).astype(jnp.bfloat16)
        variants = {
            "xla": lambda a, r: bench_epilogue.gelu_bias(
                jax.lax.ragged_dot(a[0], r, a[1]),
                expert_bias_rows(bias, a[1], m, jnp.bfloat16)),
            **{v: (lambda jh: lambda a, r: jh.hopper_ragged_dot(
                a[0], r, a[1], bias=bias, activation="gelu_tanh"))(jh)
               for v, jh in (("base", jax_hopper_base), ("new", jax_hopper))}}
        reference = lambda a, r: bench_epilogue.gelu_bias(  # noqa: E731
            jax.lax.ragged_dot(a[0], r, a[1], preferred_element_type=jnp.float32),
            expert_bias_rows(bias, a[1], m, jnp.float32))

    def step(unit):  # a is (lhs, sizes): the gradients in lhs and rhs
        return lambda a, r: training_step(lambda x, r: unit((x, a[1]), r), fused)(a[0], r)

    products = FUSED_STEP_PRODUCTS if fused else LINEAR_STEP_PRODUCTS
    return ((products * m, n, k), pairs, {v: step(f) for v, f in variants.items()},
            step(reference), worst_error)


def grouped_glu_grad_case(name: str, key):
    """The same for hopper_ragged_glu on bench_grouped case `name` (its N the gate's and up's
    columns together), uniform routing, against swiglu on jax.lax.ragged_dot's."""
    (m, n, k), pairs, _, _ = grouped_case(name, key)
    groups = bench_grouped.CASES[name][1]
    glu = lambda jh: lambda a, r: jh.hopper_ragged_glu(  # noqa: E731
        a[0], r.reshape(groups, k, 2, -1), a[1])
    ragged = lambda a, r, **kw: jax.lax.ragged_dot(a[0], r, a[1], **kw)  # noqa: E731

    def step(unit):  # a is (lhs, sizes): the gradients in lhs and rhs
        return lambda a, r: training_step(lambda x, r: unit((x, a[1]), r))(a[0], r)

    variants = {"xla": step(lambda a, r: bench_epilogue.swiglu(ragged(a, r), None)),
                "base": step(glu(jax_hopper_base)), "new": step(glu(jax_hopper))}
    reference = step(lambda a, r: bench_epilogue.swiglu(
        ragged(a, r, preferred_element_type=jnp.float32), None))
    return (3 * m, n, k), pairs, variants, reference, worst_error


def worst_error(out, ref) -> float:
    """The largest relative Frobenius error over the outputs' arrays."""
    return max(float(timing.rel_fro_error(o, r))
               for o, r in zip(jax.tree.leaves(out), jax.tree.leaves(ref)))


def fp8_case(shape, scaling: str, key):
    """(shape, pairs, {variant: f(a, b)}, reference) of an fp8 product: a and b are
    (fp8 array, scale) pairs quantized as bench_fp8.py does."""
    m, n, k = shape
    n_calls, _ = timing.call_plan(m, n, k)
    sets = bench_fp8.fp8_sets(key, m, n, k, min(n_calls, timing.n_sets_for(m * k + n * k)),
                              scaling)
    peer_name = bench_fp8.PEERS[scaling][0]
    peer = {"tensor": bench_fp8.tensor_variants, "block": bench_fp8.block_variants}[scaling]({})
    variants = {"xla": peer[peer_name],
                "base": lambda a, b: jax_hopper_base.hopper_fp8_matmul(a[0], b[0], a[1], b[1]),
                "new": lambda a, b: jax_hopper.hopper_fp8_matmul(a[0], b[0], a[1], b[1])}
    reference = lambda a, b: bench_fp8.reference(a, b, scaling)  # noqa: E731
    return shape, timing.rotation(sets, n_calls), variants, reference


def vmap_case(case, key):
    """(shape, pairs, {variant: f(a, b)}, reference) of jax.vmap over V entries a (V, M, K)
    against one b (K, N); shape is the (V*M, N, K) product it amounts to."""
    v, m, n, k = case
    n_calls, n_sets = timing.call_plan(v * m, n, k)
    sets = [(a.reshape(v, m, k), b)
            for a, b in timing.rotating_sets(key, v * m, n, k, n_sets)]
    dot32 = lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)  # noqa: E731
    variants = {"xla": jax.vmap(jnp.dot, (0, None)),
                "base": jax.vmap(jax_hopper_base.hopper_matmul, (0, None)),
                "new": jax.vmap(jax_hopper.hopper_matmul, (0, None))}
    return (v * m, n, k), timing.rotation(sets, n_calls), variants, jax.vmap(dot32, (0, None))


def vmap_train_case(case, key, unit: str):
    """(shape, pairs, {variant: step(a, b)}, reference, check) of a model's training step over
    a vmapped layer sharing its weight (a per-example model vmapped over its batch): jax.grad
    of the sum over V entries a (V, M, K) of unit "matmul" (hopper_matmul's plain product),
    "fused" (bias_gelu_units) or "glu" (hopper_glu, N the gate's and up's columns; against
    swiglu on jnp.dot), against one b (K, N). shape: the products it amounts to
    (LINEAR_STEP_PRODUCTS, FUSED_STEP_PRODUCTS, a GLU's step three)."""
    v, m, n, k = case
    n_calls, n_sets = timing.call_plan(v * m, n, k)
    sets = [(a.reshape(v, m, k), b)
            for a, b in timing.rotating_sets(key, v * m, n, k, n_sets)]

    def layer(u):
        return training_step(lambda a, b: jax.vmap(lambda x: u(x, b))(a), unit == "fused")

    if unit == "fused":
        units, reference = bias_gelu_units(jax.random.fold_in(key, 1), n)
    elif unit == "glu":
        def glu(jh):
            return lambda x, b: jh.hopper_glu(x, b.reshape(k, 2, -1))
        units = {"xla": lambda x, b: bench_epilogue.swiglu(jnp.dot(x, b), None),
                 "base": glu(jax_hopper_base), "new": glu(jax_hopper)}
        reference = lambda x, b: bench_epilogue.swiglu(  # noqa: E731
            jnp.dot(x, b, preferred_element_type=jnp.float32), None)
    else:
        units, reference = plain_units()
    products = {"matmul": LINEAR_STEP_PRODUCTS, "fused": FUSED_STEP_PRODUCTS, "glu": 3}[unit]
    return ((products * v * m, n, k), timing.rotation(sets, n_calls),
            {name: layer(u) for name, u in units.items()}, layer(reference), worst_error)


def grouped_vmap_case(case, key):
    """(shape, pairs, {variant: f(a, rhs)}, reference) of jax.vmap over E entries: a is
    (lhs (E, M, K), sizes (E, G)) (uniform routing, each entry its own), rhs the G experts
    (K, N) they share (each entry routes its rows apart: per-sequence routing); shape is the
    (E*M, N, K) product it amounts to. XLA's entries run in a loop (lax.map:
    jax.lax.ragged_dot has no batching rule for a shared rhs)."""
    e, m, g, k, n = case

    def xla(**kw):
        return lambda a, r: jax.lax.map(
            lambda xs: jax.lax.ragged_dot(xs[0], r, xs[1], **kw), a)

    def hopper(module):
        return lambda a, r: jax.vmap(module.hopper_ragged_dot, in_axes=(0, None, 0))(a[0], r, a[1])

    variants = {"xla": xla(), "base": hopper(jax_hopper_base), "new": hopper(jax_hopper)}
    return (e * m, n, k), grouped_vmap_pairs(case, key, 2 * e * m * n), variants, \
        xla(preferred_element_type=jnp.float32)


def grouped_vmap_grad_case(case, key, summed: bool = False, unit: str = "plain"):
    """(shape, pairs, {variant: step(a, rhs)}, reference, check) of grouped_vmap_case's
    training step: each entry's gradients in its rows and in the experts (per-entry weight
    gradients, as per-example gradients are), jax.vmap of jax.grad; summed: a model's step
    over the vmapped layer, jax.grad of the sum over the entries (one gradient of the shared
    experts). unit "plain" (hopper_ragged_dot), "fused" (with a per-expert bias and tanh-GELU
    fused, against the same in jnp on jax.lax.ragged_dot) or "glu" (hopper_ragged_glu, N the
    gate's and up's columns, against swiglu on jax.lax.ragged_dot's). XLA's entries run as
    lax.map of jax.grad of jax.lax.ragged_dot (summed: jax.grad of the map). shape: the
    products it amounts to (LINEAR_STEP_PRODUCTS; a GLU's step needs its forward too, and a
    fused activation's loss is step_loss's that needs it: three)."""
    e, m, g, k, n = case
    f32 = jnp.float32
    bias = jax.random.normal(jax.random.fold_in(key, 1), (g, n), f32).astype(jnp.bfloat16)

    def step(ragged, vmapped: bool):
        def one(x, s, r):
            return training_step(lambda x, r: ragged(x, r, s), unit == "fused")(x, r)

        def entries(x, s, r):
            if vmapped:
                return jax.vmap(lambda x, s: ragged(x, r, s))(x, s)
            return jax.lax.map(lambda xs: ragged(xs[0], r, xs[1]), (x, s))

        if summed:
            return lambda a, r: training_step(lambda x, r: entries(x, a[1], r),
                                              unit == "fused")(a[0], r)
        if vmapped:
            return lambda a, r: jax.vmap(one, (0, 0, None))(a[0], a[1], r)
        return lambda a, r: jax.lax.map(lambda xs: one(xs[0], xs[1], r), a)

    def xla(**kw):
        if unit == "glu":
            return lambda x, r, s: bench_epilogue.swiglu(jax.lax.ragged_dot(x, r, s, **kw), None)
        if unit == "fused":
            return lambda x, r, s: bench_epilogue.gelu_bias(
                jax.lax.ragged_dot(x, r, s, **kw),
                expert_bias_rows(bias, s, m, kw.get("preferred_element_type", jnp.bfloat16)))
        return lambda x, r, s: jax.lax.ragged_dot(x, r, s, **kw)

    def hopper(module):
        if unit == "glu":
            return lambda x, r, s: module.hopper_ragged_glu(x, r.reshape(g, k, 2, -1), s)
        if unit == "fused":
            return lambda x, r, s: module.hopper_ragged_dot(x, r, s, bias=bias,
                                                            activation="gelu_tanh")
        return module.hopper_ragged_dot

    variants = {"xla": step(xla(), False), "base": step(hopper(jax_hopper_base), True),
                "new": step(hopper(jax_hopper), True)}
    reference = step(xla(preferred_element_type=f32), False)
    outputs = 2 * (e * m * k + (1 if summed else e) * g * k * n)  # d lhs and d rhs, bf16
    products = LINEAR_STEP_PRODUCTS if unit == "plain" else 3
    return ((products * e * m, n, k), grouped_vmap_pairs(case, key, outputs), variants,
            reference, worst_error)


def grouped_vmap_pairs(case, key, out_bytes: int):
    """The rotated ((lhs (E, M, K), sizes (E, G)), rhs (G, K, N)) pairs of an ExMxGxKxN case,
    as many calls as fill a timed run (outputs of out_bytes each kept till it ends). Sets
    rotate the experts too (past the L2, as timing's sets), and rhs is an argument: closed
    over, a constant of hundreds of MB in the HLO outgrew the 2 GB protobuf limit (H100,
    2026-12-06)."""
    e, m, g, k, n = case
    n_calls, n_sets = timing.call_plan(e * m, n, k, set_bytes=2 * (e * m * k + g * k * n),
                                       out_bytes=out_bytes)
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 1 << 30)))
    sets = []
    for kk in jax.random.split(key, n_sets):
        ka, kb = jax.random.split(kk)
        sizes = np.stack([bench_grouped.group_sizes(rng, m, g, "uniform") for _ in range(e)])
        sets.append(((jax.random.normal(ka, (e, m, k), jnp.float32).astype(jnp.bfloat16),
                      jnp.asarray(sizes, jnp.int32)),
                     (jax.random.normal(kb, (g, k, n), jnp.float32)
                      / k ** 0.5).astype(jnp.bfloat16)))
    jax.block_until_ready(sets)
    return timing.rotation(sets, n_calls)


def parse_quantize_case(text: str):
    """'RxC:MODE' -> ((R, C), MODE)."""
    shape, _, mode = text.partition(":")
    if mode not in bench_quantize.MODES:
        raise argparse.ArgumentTypeError(
            f"quantize case {text!r}: want RxC:MODE, MODE one of {list(bench_quantize.MODES)}")
    return bench_quantize.parse_rc(shape), mode


def quantize_case(shape, mode: str, key):
    """(pairs, {variant: f(x, _)}, reference, check, bytes moved) of one quantization
    (bench_quantize.py's inputs and variants): the jnp spelling as "xla", the two builds'
    quantize_fp8; check(out, ref) -> the worst relative error of out's dequantised copies
    against ref's."""
    pairs, moved, copies, _, _ = bench_quantize.case(key, *shape, mode)
    kwargs = bench_quantize.MODES[mode]
    variants = {"xla": bench_quantize.variants(kwargs)["jnp"],
                "base": bench_quantize.variants(kwargs, jax_hopper_base)["hopper"],
                "new": bench_quantize.variants(kwargs, jax_hopper)["hopper"]}
    check = lambda out, ref: float(jnp.max(  # noqa: E731
        bench_quantize.copy_errors(out, ref, *copies)))
    return pairs, variants, variants["xla"], check, moved


def measure(args, name, shape, pairs, variants, reference, check=None, moved=None):
    """One plan's row: its variants timed (base and new interleaved, XLA apart), each result's
    error against the reference in its rel_err."""
    check = check or (lambda out, ref: float(timing.rel_fro_error(out, ref)))
    unit, field = ("GB/s", "gbs") if moved else ("TFLOP/s", "tflops")
    ref = jax.jit(reference)(*pairs[-1])
    runs = {v: (timing.chained(f), pairs) for v, f in variants.items()}
    timed = timing.time_interleaved({v: runs[v] for v in ("base", "new")}, args.reps)
    timed.update(timing.time_interleaved({"xla": runs["xla"]}, args.reps))
    row = dict(case=name, shape=list(shape))
    for v, r in timed.items():
        if isinstance(r, Exception):
            raise r
        err = check(r["out"], ref)
        row[v] = dict(ms=r["median_s"] * 1e3, times_ms=[t * 1e3 for t in r["times_s"]],
                      **{field: moved / r["median_s"] / 1e9 if moved else
                         timing.tflops(*shape, r["median_s"])}, rel_err=err)
    row["new_over_base"] = row["base"]["ms"] / row["new"]["ms"]  # speed ratio, > 1: faster
    device = ""
    if args.device_time and (d := timing.device_times(
            {v: runs[v] for v in ("base", "new")}, args.reps)) is not None:
        # XLA's in a trace of its own, as its chained time (apart from the two builds).
        d.update(timing.device_times({"xla": runs["xla"]}, args.reps) or {})
        for v in d:
            row[v]["device_us"] = d[v] * 1e6
        row["new_over_base_device"] = d["base"] / d["new"]
        # base's time first, then new's; the ratio is new's speed over base's (> 1: faster)
        device = (f"  device base {row['base']['device_us']:.1f} / new "
                  f"{row['new']['device_us']:.1f} us: new/base {row['new_over_base_device']:.3f}")
        if "xla" in d:
            row["new_over_xla_device"] = d["xla"] / d["new"]
            device += (f" (xla {row['xla']['device_us']:.1f} us, new/xla "
                       f"{row['new_over_xla_device']:.3f})")
    print(f"{name:28s} xla {row['xla'][field]:6.1f}  base {row['base'][field]:6.1f}  "
          f"new {row['new'][field]:6.1f} {unit}  new/base {row['new_over_base']:.3f}  "
          f"err {row['new']['rel_err']:.1e}{device}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--shapes", nargs="*", type=bench_gemm.parse_shape,
                        default=bench_gemm.DEFAULT_SHAPES, help="MxNxK of the plain GEMMs")
    parser.add_argument("--config", type=json.loads, default=None,
                        help="GemmConfig fields (JSON) of both builds' --shapes calls, e.g. "
                             "'{\"block_n\": 128, \"schedule\": \"pingpong\", "
                             "\"stream_k\": false}'")
    parser.add_argument("--epilogue-cases", nargs="*", default=list(bench_epilogue.CASES),
                        choices=list(bench_epilogue.CASES),
                        help="bench_epilogue's cases to time (default: every one; the flag "
                             "with no names: none)")
    parser.add_argument("--glu-cases", nargs="*", type=bench_gemm.parse_shape, default=[],
                        help="MxNxK of hopper_glu products (N: the gate's and up's columns "
                             "together), against swiglu on jnp.dot")
    parser.add_argument("--grad-cases", nargs="*", type=bench_gemm.parse_shape, default=[],
                        help="MxNxK: hopper_matmul's training step (the gradients in a and b) "
                        "against jnp.dot's")
    parser.add_argument("--glu-grad-cases", nargs="*", type=bench_gemm.parse_shape, default=[],
                        help="MxNxK of hopper_glu training steps (the gradients in x and w)")
    parser.add_argument("--fused-grad-cases", nargs="*", type=bench_gemm.parse_shape,
                        default=[], help="MxNxK: training steps of hopper_matmul with a bias "
                        "and tanh-GELU fused, against the same on jnp.dot")
    parser.add_argument("--grouped-cases", nargs="*", default=[],
                        choices=list(bench_grouped.CASES))
    parser.add_argument("--grouped-grad-cases", nargs="*", default=[],
                        choices=list(bench_grouped.CASES),
                        help="bench_grouped cases as hopper_ragged_dot training steps")
    parser.add_argument("--grouped-fused-grad-cases", nargs="*", default=[],
                        choices=list(bench_grouped.CASES),
                        help="bench_grouped cases as training steps of hopper_ragged_dot with "
                        "a per-expert bias and tanh-GELU fused")
    parser.add_argument("--grouped-glu-grad-cases", nargs="*", default=[],
                        choices=list(bench_grouped.CASES),
                        help="bench_grouped cases as hopper_ragged_glu training steps")
    parser.add_argument("--grouped-fp8-cases", nargs="*", default=[],
                        choices=list(bench_grouped.CASES))
    parser.add_argument("--fp8-cases", nargs="*", type=bench_gemm.parse_shape, default=[],
                        help="MxNxK of fp8 products (hopper_fp8_matmul)")
    parser.add_argument("--fp8-scaling", choices=("tensor", "block"), default="block")
    parser.add_argument("--quantize-cases", nargs="*", type=parse_quantize_case, default=[],
                        help="RxC:MODE quantizations (bench_quantize.py's modes)")
    parser.add_argument("--vmap-cases", nargs="*", type=timing.dims_parser("VxMxNxK"), default=[],
                        help="VxMxNxK: jax.vmap over V (M, K) entries against one (K, N)")
    parser.add_argument("--vmap-train-cases", nargs="*", type=timing.dims_parser("VxMxNxK"),
                        default=[], help="a model's training step over a --vmap-cases layer "
                        "(jax.grad of the sum over the entries: one gradient of the shared b)")
    parser.add_argument("--fused-vmap-train-cases", nargs="*",
                        type=timing.dims_parser("VxMxNxK"), default=[],
                        help="the same over hopper_matmul with a bias and tanh-GELU fused")
    parser.add_argument("--glu-vmap-train-cases", nargs="*",
                        type=timing.dims_parser("VxMxNxK"), default=[],
                        help="the same over hopper_glu (N: the gate's and up's columns) against "
                        "swiglu on jnp.dot")
    parser.add_argument("--grouped-vmap-cases", nargs="*", type=timing.dims_parser("ExMxGxKxN"),
                        default=[], help="ExMxGxKxN: jax.vmap of hopper_ragged_dot over E "
                        "entries of M rows, each routed apart to G shared experts (K -> N)")
    parser.add_argument("--grouped-vmap-train-cases", nargs="*",
                        type=timing.dims_parser("ExMxGxKxN"), default=[],
                        help="a model's training step over a --grouped-vmap-cases layer "
                        "(jax.grad of the sum over the entries: one gradient of the shared "
                        "experts)")
    parser.add_argument("--grouped-glu-vmap-train-cases", nargs="*",
                        type=timing.dims_parser("ExMxGxKxN"), default=[],
                        help="the same step over hopper_ragged_glu (N: the gate's and up's "
                        "columns) against swiglu on jax.lax.ragged_dot")
    parser.add_argument("--grouped-fused-vmap-train-cases", nargs="*",
                        type=timing.dims_parser("ExMxGxKxN"), default=[],
                        help="the same step over hopper_ragged_dot with a per-expert bias and "
                        "tanh-GELU fused, against the same in jnp on jax.lax.ragged_dot")
    parser.add_argument("--grouped-vmap-grad-cases", nargs="*",
                        type=timing.dims_parser("ExMxGxKxN"), default=[],
                        help="the training step of a --grouped-vmap-cases case (jax.vmap of "
                        "jax.grad in each entry's rows and the shared experts)")
    parser.add_argument("--device-time", action="store_true",
                        help="also base's and new's device time per call (timing.device_times: "
                             "one trace, the two in shuffled rounds) and their ratio")
    args = parser.parse_args()
    timing.require_kernels(jax_hopper, jax_hopper_base)
    key = jax.random.key(0)
    rows, wrong = [], False
    plans = []
    dense = cases(args.shapes, args.epilogue_cases, args.glu_cases, args.config)
    for i, (name, (shape, variants, reference)) in enumerate(dense.items()):
        m, n, k = shape
        n_calls, n_sets = timing.call_plan(m, n, k)
        sets = timing.rotating_sets(jax.random.fold_in(key, i), m, n, k, n_sets)
        plans.append((name, shape, timing.rotation(sets, n_calls), variants, reference))
    for i, name in enumerate(args.grouped_cases):
        plans.append((f"grouped_{name}", *grouped_case(name, jax.random.fold_in(key, 1000 + i))))
    for i, name in enumerate(args.grouped_fp8_cases):
        plans.append((f"grouped_fp8_{name}",
                      *grouped_fp8_case(name, jax.random.fold_in(key, 1000 + i))))
    for i, shape in enumerate(args.fp8_cases):
        plans.append((f"fp8_{args.fp8_scaling}_{bench_gemm.shape_name(shape)}",
                      *fp8_case(shape, args.fp8_scaling, jax.random.fold_in(key, 2000 + i))))
    # A training step: its check (worst_error) among the plan, rated in TFLOP/s (no bytes).
    for i, shape in enumerate(args.grad_cases):
        plans.append((f"grad_{bench_gemm.shape_name(shape)}",
                      *grad_case(shape, jax.random.fold_in(key, 5500 + i)), None))
    for i, shape in enumerate(args.fused_grad_cases):
        plans.append((f"fused_grad_{bench_gemm.shape_name(shape)}",
                      *grad_case(shape, jax.random.fold_in(key, 5700 + i), fused=True), None))
    for i, shape in enumerate(args.glu_grad_cases):
        plans.append((f"glu_grad_{bench_gemm.shape_name(shape)}",
                      *glu_grad_case(shape, jax.random.fold_in(key, 5000 + i)), None))
    for i, name in enumerate(args.grouped_grad_cases):
        plans.append((f"grouped_grad_{name}",
                      *grouped_grad_case(name, jax.random.fold_in(key, 6500 + i)), None))
    for i, name in enumerate(args.grouped_fused_grad_cases):
        plans.append((f"grouped_fused_grad_{name}",
                      *grouped_grad_case(name, jax.random.fold_in(key, 6700 + i), True), None))
    for i, name in enumerate(args.grouped_glu_grad_cases):
        plans.append((f"grouped_glu_grad_{name}",
                      *grouped_glu_grad_case(name, jax.random.fold_in(key, 6000 + i)), None))
    for i, case in enumerate(args.vmap_cases):
        plans.append((f"vmap_{'x'.join(map(str, case))}",
                      *vmap_case(case, jax.random.fold_in(key, 4000 + i))))
    for i, case in enumerate(args.vmap_train_cases):
        plans.append((f"vmap_train_{'x'.join(map(str, case))}",
                      *vmap_train_case(case, jax.random.fold_in(key, 4500 + i), "matmul"), None))
    for i, case in enumerate(args.fused_vmap_train_cases):
        plans.append((f"fused_vmap_train_{'x'.join(map(str, case))}",
                      *vmap_train_case(case, jax.random.fold_in(key, 4600 + i), "fused"), None))
    for i, case in enumerate(args.glu_vmap_train_cases):
        plans.append((f"glu_vmap_train_{'x'.join(map(str, case))}",
                      *vmap_train_case(case, jax.random.fold_in(key, 4700 + i), "glu"), None))
    for i, case in enumerate(args.grouped_vmap_cases):
        plans.append((f"grouped_vmap_{'x'.join(map(str, case))}",
                      *grouped_vmap_case(case, jax.random.fold_in(key, 7000 + i))))
    for i, case in enumerate(args.grouped_vmap_grad_cases):
        plans.append((f"grouped_vmap_grad_{'x'.join(map(str, case))}",
                      *grouped_vmap_grad_case(case, jax.random.fold_in(key, 8000 + i)), None))
    for i, case in enumerate(args.grouped_vmap_train_cases):
        plans.append((f"grouped_vmap_train_{'x'.join(map(str, case))}",
                      *grouped_vmap_grad_case(case, jax.random.fold_in(key, 8500 + i), True),
                      None))
    for i, case in enumerate(args.grouped_glu_vmap_train_cases):
        plans.append((f"grouped_glu_vmap_train_{'x'.join(map(str, case))}",
                      *grouped_vmap_grad_case(case, jax.random.fold_in(key, 9000 + i), True,
                                              "glu"), None))
    for i, case in enumerate(args.grouped_fused_vmap_train_cases):
        plans.append((f"grouped_fused_vmap_train_{'x'.join(map(str, case))}",
                      *grouped_vmap_grad_case(case, jax.random.fold_in(key, 9500 + i), True,
                                              "fused"), None))
    # A plan: (name, shape, pairs, variants, reference[, check, bytes moved]); without the last
    # two, a product checked by its relative Frobenius error and rated in TFLOP/s (bytes None:
    # rated in TFLOP/s too).
    for i, (shape, mode) in enumerate(args.quantize_cases):
        plans.append((f"quantize_{mode}_{shape[0]}x{shape[1]}", shape,
                      *quantize_case(shape, mode, jax.random.fold_in(key, 3000 + i))))
    failed = {}
    for name, shape, pairs, variants, reference, *quant in plans:
        try:
            row = measure(args, name, shape, pairs, variants, reference, *quant)
        except jax.errors.JaxRuntimeError as e:  # a peer (or the reference) out of memory
            failed[name] = str(e).splitlines()[0]
            print(f"{name:28s} failed: {failed[name][:160]}", flush=True)
            continue
        wrong |= any(not row[v]["rel_err"] <= ERR_LIMIT for v in ("xla", "base", "new"))
        rows.append(row)
    if not rows:
        print("every case failed")
        return 1
    ratios = [r["new_over_base"] for r in rows]
    summary = dict(geomean=timing.geomean(ratios), worst=min(ratios),
                   worst_case=rows[ratios.index(min(ratios))]["case"], failed=failed)
    print(f"new/base speed: geomean {summary['geomean']:.4f}, worst {summary['worst']:.4f} "
          f"({summary['worst_case']}); results {'WRONG' if wrong else 'ok'}")
    if device_ratios := [r["new_over_base_device"] for r in rows if "new_over_base_device" in r]:
        summary.update(device_geomean=timing.geomean(device_ratios),
                       device_worst=min(device_ratios))
        print(f"new/base device time: geomean {summary['device_geomean']:.4f}, worst "
              f"{summary['device_worst']:.4f}")
    if xla_ratios := [r["new_over_xla_device"] for r in rows if "new_over_xla_device" in r]:
        summary.update(device_geomean_vs_xla=timing.geomean(xla_ratios))
        print(f"new/xla device time: geomean {summary['device_geomean_vs_xla']:.4f}, "
              f"{min(xla_ratios):.3f}-{max(xla_ratios):.3f}")
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat(), argv=sys.argv)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"ab_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, summary=summary, results=rows), f, indent=1)
    print(f"wrote {path}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
