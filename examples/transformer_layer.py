"""A pre-norm transformer decoder block whose dense projections run on jax_hopper, checked
against and timed beside the same block written with jnp matmuls.

    python examples/transformer_layer.py [--d-model 4096] [--d-ff 14336] [--heads 32]
        [--batch 4] [--seq 2048] [--reps 10] [--attention cudnn|xla] [--seed 0] [--json PATH]
        [--fp8 tensor|delayed|block] [--train-steps 30]

Block: x += W_o attn(RMSNorm(x) W_qkv); x += W_down (silu(h W_gate) * (h W_up)), h = RMSNorm(x),
with causal attention from jax.nn.dot_product_attention. Both versions share the parameters and
the code (`make_layer`); only the projection functions differ: hopper_matmul (residual adds
fused) and hopper_glu for the gated MLP input, against jnp. Each version runs a jitted
forward pass and a jitted training step (fp32 mean-square loss against a random target,
jax.value_and_grad, a hand-written Adam update). Prints median times, tokens/s, the speedup of
hopper_matmul over jnp, and the relative differences of output, loss and every parameter
gradient between the versions; exits with status 1 when one is above its bound. A timed sample
is three calls issued back to back, then waited for (per call), as a training loop that does
not wait for each step runs them.

--fp8 RECIPE adds two fp8 versions of the same block, timed in the same process beside the two
above: "fp8", every projection (the gated MLP input included) through fp8_matmul(h, w,
recipe=RECIPE), which quantizes inside and runs its forward and both backward GEMMs in fp8
(recipe "delayed": each projection's amax histories, an Fp8Meta, ride in the parameters under
"fp8_meta"; the training step replaces them by their gradient instead of updating them, and they
are calibrated by one forward and backward pass before anything is timed or trained); and
"XLA fp8", every projection written in jnp as per-tensor fp8 (amax scales, e4m3 operands, e5m2
gradient, lax.dot_general on the fp8 operands with a bf16 result, times the scales: the pattern
XLA hands to cuBLASLt's fp8 GEMM), with a custom_vjp so that it trains too. It also trains the
jnp (bf16) and fp8 versions for --train-steps Adam steps from the same init on one fixed batch
and reports both loss curves and the largest relative difference between them. The fp8 numbers
are reported, not checked: their error is the recipe's, not a bug's (the exit status stays the
bf16 check's).

The defaults above (cuDNN attention) are for a Hopper GPU. Without one they shrink to d_model
256, d_ff 512, 4 heads, 2 x 64 tokens and XLA attention, and hopper_matmul runs its pure-JAX
reference lowering: the numerical check still means something, the timings do not.
"""

import argparse
import functools
import json
import math
import statistics
import sys
import time

import jax
import jax.numpy as jnp

import jax_hopper
from jax_hopper import fp8_matmul, hopper_glu, hopper_matmul
from jax_hopper.timing import shuffled_rounds

F32 = jnp.float32
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2

# Bounds on the hopper-vs-jnp differences. bf16 keeps 8 significant bits (unit roundoff
# u = 2^-9 ~ 2e-3) and the two versions round at different points: a fused residual projection
# rounds h W + x once, jnp rounds h W and then the sum, and on a GPU the fp32 sums run in other
# orders. One rounding apart per projection, through four projections, attention and two
# norms, gives output differences of a few u (measured: ~3e-3 at the H100 defaults, ~4e-3 at
# the toy size): 2e-2 (~10 u) leaves room and still catches a wrong transpose, operand or
# epilogue (a 5% scale error in every projection gives 0.11; tests/ checks that it fails).
# Gradients pass through twice as many bf16 roundings (the backward GEMMs, the softmax and
# silu derivatives) and are sums over every token of products of perturbed factors: 5e-2
# (measured: at most ~7e-3).
# The loss is an fp32 mean over all outputs, which averages the rounding noise away: 1e-2.
OUTPUT_BOUND, GRAD_BOUND, LOSS_BOUND = 2e-2, 5e-2, 1e-2


def hopper_dense(h, w, residual=None):
    """h @ w (+ residual) in one hopper_matmul: the residual add is fused into the epilogue."""
    return hopper_matmul(h, w, residual=residual)


def jnp_dense(h, w, residual=None):
    """The same projection as a user would write it in jnp: bf16 product, then the add."""
    y = h @ w
    return y if residual is None else residual + y


def fp8_dense_for(recipe):
    """dense() through fp8_matmul with `recipe`: h and w stay bf16 and are quantized inside, the
    same bf16 result and gradients come out; the residual add is fused into the fp8 GEMM's
    epilogue. meta: the projection's Fp8Meta (recipe "delayed")."""
    def fp8_dense(h, w, residual=None, meta=None):
        return fp8_matmul(h, w, recipe=recipe, meta=meta, residual=residual)
    return fp8_dense


# The projections whose weights p holds: "fp8_meta" (recipe "delayed") has an Fp8Meta each.
PROJECTIONS = ("w_qkv", "w_o", "w_gate_up", "w_down")


def quantize_per_tensor(x, dtype):
    """x -> (fp8 q, fp32 scale), x ~= q * scale, as a user writes per-tensor scaling in jnp: the
    current amax (no history) over fp8_max, x / scale clipped to +-fp8_max (a bare astype turns
    what rounds past it into NaN: e4m3fn has no Inf), then rounded to fp8."""
    fp8_max = float(jnp.finfo(dtype).max)
    amax = jnp.max(jnp.abs(x)).astype(F32)
    scale = jnp.where(amax > 0, amax / fp8_max, 1.0)  # an all-zero tensor: any scale will do
    return jnp.clip(x.astype(F32) / scale, -fp8_max, fp8_max).astype(dtype), scale


def scaled_fp8_dot(a, b, a_scale, b_scale, contract):
    """lax.dot_general on fp8 operands with a bf16 result, times the product of the scales: the
    pattern XLA's GEMM rewriter turns into one cuBLASLt fp8 GEMM on Hopper (it adds transposes
    of the operands where their layouts are not the K-major ones that GEMM takes)."""
    y = jax.lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=jnp.bfloat16)
    return (y * (a_scale * b_scale)).astype(jnp.bfloat16)


@jax.custom_vjp
def xla_fp8_matmul(x, w):
    """x (M, K) @ w (K, N) in per-tensor fp8 written in plain JAX: fp8_matmul's "tensor" recipe
    (e4m3 operands, e5m2 gradient, fp8 GEMMs forward and backward) the way XLA runs it. Without
    the custom_vjp, jax.grad would differentiate through the rounding to fp8 (zero almost
    everywhere) and the backward GEMMs would not be fp8 ones."""
    return _xla_fp8_forward(x, w)[0]


def _xla_fp8_forward(x, w):
    (xq, sx), (wq, sw) = quantize_per_tensor(x, E4M3), quantize_per_tensor(w, E4M3)
    return scaled_fp8_dot(xq, wq, sx, sw, ((1,), (0,))), (xq, sx, wq, sw)


def _xla_fp8_backward(res, dy):
    xq, sx, wq, sw = res
    gq, sg = quantize_per_tensor(dy, E5M2)  # gradients: range over precision
    dx = scaled_fp8_dot(gq, wq, sg, sw, ((1,), (1,)))  # dy (M, N) . w (K, N) over N
    dw = scaled_fp8_dot(xq, gq, sx, sg, ((0,), (0,)))  # x (M, K) . dy (M, N) over M
    return dx, dw


xla_fp8_matmul.defvjp(_xla_fp8_forward, _xla_fp8_backward)


def xla_fp8_dense(h, w, residual=None):
    """dense() through xla_fp8_matmul; the residual is a bf16 add (XLA may fuse it into the
    cuBLASLt call's output; fp8_dense_for fuses it into our epilogue)."""
    y = xla_fp8_matmul(h, w)
    return y if residual is None else residual + y


def hopper_swiglu(h, w_gate_up):
    """silu(h W_gate) * (h W_up) in one hopper_glu launch: (d, 2 d_ff) read as (d, 2, d_ff), the
    same halves jnp.split takes; the (tokens, 2 d_ff) product is never written. Under jax.grad
    hopper_glu runs unfused and keeps the product for the backward pass (gate and up are needed
    there; recomputing them would cost the whole GEMM again)."""
    return hopper_glu(h, w_gate_up.reshape(w_gate_up.shape[0], 2, -1))


def swiglu_from(dense):
    """The unit as a user would write it: one `dense` product of (d, 2 d_ff), split, silu in
    fp32, rounded once."""
    def swiglu(h, w_gate_up, **meta):
        gate, up = jnp.split(dense(h, w_gate_up, **meta), 2, axis=-1)
        return (jax.nn.silu(gate.astype(F32)) * up.astype(F32)).astype(h.dtype)
    return swiglu


def rms_norm(x, w, eps=1e-6):
    """Statistics in fp32 (a bf16 mean of squares over 4096 features loses digits)."""
    x32 = x.astype(F32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w.astype(F32)).astype(x.dtype)


def make_layer(dense, heads, attention="xla", swiglu=None):
    """The decoder block with `dense(h, w, residual=None)` as every projection but the gated
    MLP input, which is `swiglu(h, w_gate_up)` (default: swiglu_from(dense)).

    Projections see tokens flattened to (batch*seq, d_model). q, k and v come from one GEMM
    against the concatenated (d, 3d) W_qkv, and gate and up from one against (d, 2 d_ff): one
    launch of a wide N instead of three or two narrow ones.
    """
    swiglu = swiglu or swiglu_from(dense)

    def layer(p, x):  # p: init_params' dict (+ "fp8_meta"); x: (batch, seq, d_model) bf16
        b, t, d = x.shape
        metas = p.get("fp8_meta")
        meta = (lambda name: {}) if metas is None else (lambda name: {"meta": metas[name]})
        x2 = x.reshape(b * t, d)
        qkv = dense(rms_norm(x2, p["ln1"]), p["w_qkv"], **meta("w_qkv"))
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(b, t, heads, d // heads) for i in range(3))
        o = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=attention)
        x2 = dense(o.reshape(b * t, d), p["w_o"], residual=x2, **meta("w_o"))
        h = swiglu(rms_norm(x2, p["ln2"]), p["w_gate_up"], **meta("w_gate_up"))
        x2 = dense(h, p["w_down"], residual=x2, **meta("w_down"))
        return x2.reshape(b, t, d)
    return layer


def init_params(key, d_model, d_ff, dtype=jnp.bfloat16):
    """Weights ~ N(0, 1/fan_in) so every activation stays O(1); norm gains near 1."""
    ks = jax.random.split(key, 6)

    def w(k, fan_in, fan_out):
        return (jax.random.normal(k, (fan_in, fan_out), F32) / math.sqrt(fan_in)).astype(dtype)

    def gain(k):
        return (1 + 0.1 * jax.random.normal(k, (d_model,), F32)).astype(dtype)

    return dict(ln1=gain(ks[0]), w_qkv=w(ks[1], d_model, 3 * d_model),
                w_o=w(ks[2], d_model, d_model), ln2=gain(ks[3]),
                w_gate_up=w(ks[4], d_model, 2 * d_ff), w_down=w(ks[5], d_ff, d_model))


def mse_loss(layer, p, x, target):
    return jnp.mean(jnp.square(layer(p, x).astype(F32) - target))


def adam_init(p):
    """fp32 moments: bf16 would round away most of (1 - b2) * g^2. None for "fp8_meta" (not
    optimized: make_train_step)."""
    zeros = jax.tree.map(lambda w: jnp.zeros(w.shape, F32),
                         {k: w for k, w in p.items() if k != "fp8_meta"})
    return jnp.zeros((), jnp.int32), zeros, zeros


def adam_update(p, g, state, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8):
    step, m, v = state
    step = step + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(F32), m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(F32)), v, g)
    scale = lr * jnp.sqrt(1 - b2 ** step) / (1 - b1 ** step)
    p = jax.tree.map(lambda w, m, v: (w.astype(F32) - scale * m / (jnp.sqrt(v) + eps))
                     .astype(w.dtype), p, m, v)
    return p, (step, m, v)


def make_train_step(layer):
    def train_step(p, opt_state, x, target):
        loss, g = jax.value_and_grad(functools.partial(mse_loss, layer))(p, x, target)
        # Delayed scaling's amax histories: their gradient is their next value, not a step.
        metas = g.pop("fp8_meta", None)
        p, opt_state = adam_update({k: w for k, w in p.items() if k != "fp8_meta"}, g, opt_state)
        return (p if metas is None else p | {"fp8_meta": metas}), opt_state, loss
    return train_step


def with_calibrated_metas(layer, params, x, target, length=16):
    """params with an "fp8_meta" entry per projection whose histories hold amaxes seen in
    forward and backward passes. A fresh meta scales by 1, which flushes this loss's gradients
    (~1e-7) to zero in e5m2: a pass records the right dy amax only for projections whose
    gradient did not come through one still uncalibrated, so it takes one pass per projection
    on the longest gradient path (the four here; H100, 2026-11-25: calibrated by one pass, the
    first Adam step moved the loss half as far as bf16's and the curve stayed a step behind)."""
    p = params | {"fp8_meta": {name: jax_hopper.fp8_meta(length) for name in PROJECTIONS}}
    grad = jax.jit(jax.grad(functools.partial(mse_loss, layer)))
    for _ in PROJECTIONS:
        p = p | {"fp8_meta": grad(p, x, target)["fp8_meta"]}
    return p


def train_curve(train_step, params, x, target, steps):
    """The losses of `steps` steps of the jitted train_step from params and fresh Adam moments,
    all on the one (x, target) batch: two versions started alike then differ only by their
    arithmetic, and any gap between their curves is what that arithmetic does to training."""
    p, opt_state, losses = params, adam_init(params), []
    for _ in range(steps):
        p, opt_state, loss = train_step(p, opt_state, x, target)
        losses.append(float(loss))
    return losses


def median_seconds(runs, reps, warmup=2, pipeline=3):
    """{name: f} -> {name: median wall time of f() per call}, after warm-up calls (the first
    compiles).

    One sample is `pipeline` calls issued back to back, then waited for: a training loop does
    not wait for each step, so the host enqueues a step while the GPU runs the one before, and
    the GPU's time is what counts (a step waited for alone adds the host's dispatch of its first
    kernels, and any stretch where the host enqueues slower than the GPU runs: 1.2-1.8 ms per
    step of this layer on the H100, 2026-11-25). The timed calls go in rounds, each version once
    a round in a new order (jax_hopper.timing.shuffled_rounds): a GPU's clock drifts with its
    temperature and power draw by several percent over seconds, and timed one after the other,
    one version would get the cool GPU and the other the hot one; shuffled, no version always
    runs right after the same one (after a low-power one it may start on boosted clocks).
    """
    for f in runs.values():
        for _ in range(warmup):
            jax.block_until_ready(f())
    times = {name: [] for name in runs}
    for round_ in shuffled_rounds(list(runs), reps):
        for name in round_:
            start = time.perf_counter()
            jax.block_until_ready([runs[name]() for _ in range(pipeline)])
            times[name].append((time.perf_counter() - start) / pipeline)
    return {name: statistics.median(t) for name, t in times.items()}


def rel_fro(got, want):
    """||got - want||_F / ||want||_F, in fp32."""
    got, want = got.astype(F32), want.astype(F32)
    return float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want))


def parse_args(argv, on_hopper):
    big = dict(d_model=4096, d_ff=14336, heads=32, batch=4, seq=2048)
    toy = dict(d_model=256, d_ff=512, heads=4, batch=2, seq=64)
    sizes = big if on_hopper else toy
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in sizes.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default,
                        help="default %(default)s")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions (median)")
    # cuDNN's fused attention keeps the (T x T) scores out of memory, so the layer's time is
    # mostly its GEMMs; CPU has only the XLA implementation.
    ap.add_argument("--attention", choices=("xla", "cudnn"),
                    default="cudnn" if on_hopper else "xla",
                    help="jax.nn.dot_product_attention implementation, the same in both "
                         "versions (default: cudnn on a Hopper GPU, else xla)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--fp8", choices=("tensor", "delayed", "block"),
                    help="also time and train the block with fp8_matmul (this recipe) and with "
                         "per-tensor fp8 written in jnp for XLA")
    ap.add_argument("--train-steps", type=int, default=30,
                    help="with --fp8: Adam steps of the bf16-vs-fp8 training run "
                         "(default %(default)s)")
    args = ap.parse_args(argv)
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if args.train_steps < 1:
        ap.error(f"--train-steps {args.train_steps} must be at least 1")
    return args


def run(args):
    """Builds, checks and times both versions; returns the results as a dict."""
    kp, kx, kt = jax.random.split(jax.random.key(args.seed), 3)
    params = init_params(kp, args.d_model, args.d_ff)
    x = jax.random.normal(kx, (args.batch, args.seq, args.d_model), F32).astype(jnp.bfloat16)
    target = jax.random.normal(kt, x.shape, F32)
    opt_state = adam_init(params)

    # Every timed train step starts from the same params (the step is a pure function), so
    # all versions time identical work.
    versions = {"hopper": (hopper_dense, hopper_swiglu), "jnp": (jnp_dense, None)}
    if args.fp8:  # swiglu_from(dense): the gated MLP input goes through the fp8 dense as well
        versions |= {"fp8": (fp8_dense_for(args.fp8), None), "xla_fp8": (xla_fp8_dense, None)}
    outs, losses, grads, runs, train_steps, start = {}, {}, {}, {}, {}, {}
    for name, (dense, swiglu) in versions.items():
        layer = make_layer(dense, args.heads, args.attention, swiglu)
        p = start[name] = (with_calibrated_metas(layer, params, x, target)
                           if name == "fp8" and args.fp8 == "delayed" else params)
        forward = jax.jit(layer)
        train_step = train_steps[name] = jax.jit(make_train_step(layer))
        outs[name] = forward(p, x)
        losses[name], grads[name] = jax.jit(jax.value_and_grad(
            functools.partial(mse_loss, layer)))(p, x, target)
        runs[name, "forward_s"] = functools.partial(forward, p, x)
        runs[name, "train_step_s"] = functools.partial(train_step, p, opt_state, x, target)
    medians = median_seconds(runs, reps=args.reps)
    times = {name: {key: t for (n, key), t in medians.items() if n == name} for name in versions}

    loss_h, loss_j = float(losses["hopper"]), float(losses["jnp"])
    errors = {"output": rel_fro(outs["hopper"], outs["jnp"]),
              "loss": abs(loss_h - loss_j) / abs(loss_j)}
    bounds = {"output": OUTPUT_BOUND, "loss": LOSS_BOUND}
    for k in params:
        errors[f"grad {k}"] = rel_fro(grads["hopper"][k], grads["jnp"][k])
        bounds[f"grad {k}"] = GRAD_BOUND
    tokens = args.batch * args.seq
    kernels = bool(jax_hopper.kernels_available())
    config_keys = ("d_model", "d_ff", "heads", "batch", "seq", "reps", "attention", "seed")
    fp8 = {}
    if args.fp8:
        config_keys += ("fp8", "train_steps")
        fp8 = dict(fp8=fp8_results(args, params, start, x, target, outs, losses, grads, times,
                                   train_steps, kernels))
    return dict(
        config={k: getattr(args, k) for k in config_keys},
        device=jax.devices()[0].device_kind, hopper=kernels,
        dtype="bfloat16", tokens=tokens, output_shape=list(outs["hopper"].shape),
        loss={name: float(loss) for name, loss in losses.items()},
        times_s=times,
        tokens_per_s={n: {k: tokens / t for k, t in ts.items()} for n, ts in times.items()},
        # Without the kernels both sides are XLA: no speed-up to report.
        **({"speedup": {k: times["jnp"][k] / times["hopper"][k] for k in times["jnp"]}}
           if kernels else {}),
        errors=errors, bounds=bounds,
        passed=all(math.isfinite(e) and e <= bounds[k] for k, e in errors.items()), **fp8)


def fp8_results(args, params, start, x, target, outs, losses, grads, times, train_steps,
                kernels):
    """--fp8's part of the results: both fp8 versions' differences from the jnp (bf16) one, the
    bf16-vs-fp8 training run (each from its `start` parameters), and (with the kernels)
    fp8_matmul's speed-up over the others."""
    def differences(name):
        loss_j = float(losses["jnp"])
        d = {"output": rel_fro(outs[name], outs["jnp"]),
             "loss": abs(float(losses[name]) - loss_j) / abs(loss_j)}
        return d | {f"grad {k}": rel_fro(grads[name][k], grads["jnp"][k]) for k in params}

    curves = {name: train_curve(train_steps[name], start[name], x, target, args.train_steps)
              for name in ("jnp", "fp8")}
    gap = max(abs(f - j) / abs(j) for f, j in zip(curves["fp8"], curves["jnp"], strict=True))
    return dict(
        recipe=args.fp8, xla_fp8_differentiable=True,
        differences_vs_jnp={name: differences(name) for name in ("fp8", "xla_fp8")},
        training=dict(steps=args.train_steps, losses=curves, max_rel_loss_difference=gap),
        # Without the kernels fp8_matmul runs its reference and XLA fp8 runs on the CPU.
        **({"speedup": {other: {k: times[other][k] / times["fp8"][k] for k in times["fp8"]}
                        for other in ("jnp", "hopper", "xla_fp8")}} if kernels else {}))


def print_table(r):
    c = r["config"]
    print(f"layer: d_model {c['d_model']}, d_ff {c['d_ff']}, {c['heads']} heads (head dim "
          f"{c['d_model'] // c['heads']}), batch {c['batch']} x seq {c['seq']} = {r['tokens']} "
          f"tokens, {r['dtype']}, {c['attention']} attention, median of {c['reps']}")
    speedup = "speedup" in r
    print(f"\n{'':24}{'hopper_matmul':>15}{'jnp':>15}" + (f"{'speedup':>10}" if speedup else ""))
    for key, label in (("forward_s", "forward"), ("train_step_s", "train step")):
        h, j = r["times_s"]["hopper"][key], r["times_s"]["jnp"][key]
        print(f"{label + ' ms':24}{h * 1e3:15.3f}{j * 1e3:15.3f}"
              + (f"{r['speedup'][key]:9.2f}x" if speedup else ""))
        print(f"{label + ' tokens/s':24}{r['tokens_per_s']['hopper'][key]:15.4g}"
              f"{r['tokens_per_s']['jnp'][key]:15.4g}")
    print("\nhopper vs jnp: relative Frobenius difference ||h - j|| / ||j|| "
          "(loss: |h - j| / |j|)")
    for k, e in r["errors"].items():
        ok = "ok" if math.isfinite(e) and e <= r["bounds"][k] else "FAIL"
        print(f"  {k:22}{e:10.2e}   bound {r['bounds'][k]:.0e}   {ok}")
    print(f"\nnumerical check: {'passed' if r['passed'] else 'FAILED'}")
    if "fp8" in r:
        print_fp8_table(r)


# The --fp8 table's columns: (results key, heading).
FP8_COLUMNS = (("jnp", "jnp bf16"), ("hopper", "hopper_matmul"), ("fp8", "fp8_matmul"),
               ("xla_fp8", "XLA fp8"))


def print_fp8_table(r):
    f = r["fp8"]
    print(f"\nfp8: fp8_matmul, recipe {f['recipe']!r}, in every projection; XLA fp8: per-tensor "
          "e4m3 (e5m2 gradient) in jnp, lax.dot_general on fp8 operands, custom_vjp")
    print(f"\n{'':24}" + "".join(f"{head:>15}" for _, head in FP8_COLUMNS))
    for key, label in (("forward_s", "forward"), ("train_step_s", "train step")):
        print(f"{label + ' ms':24}"
              + "".join(f"{r['times_s'][n][key] * 1e3:15.3f}" for n, _ in FP8_COLUMNS))
        print(f"{label + ' tokens/s':24}"
              + "".join(f"{r['tokens_per_s'][n][key]:15.4g}" for n, _ in FP8_COLUMNS))
    if "speedup" in f:
        others = [(n, head) for n, head in FP8_COLUMNS if n != "fp8"]
        print(f"\nfp8_matmul speedup{'':6}" + "".join(f"{'over ' + h:>20}" for _, h in others))
        for key, label in (("forward_s", "forward"), ("train_step_s", "train step")):
            print(f"{label:24}" + "".join(f"{f['speedup'][n][key]:19.2f}x" for n, _ in others))
    else:
        print("(no Hopper kernels: XLA against XLA on this machine, no fp8 speed-up shown)")
    print("\nfp8 vs jnp bf16: relative Frobenius difference (loss: |f - j| / |j|), reported, "
          "not checked")
    print(f"  {'':22}{'fp8_matmul':>12}{'XLA fp8':>12}")
    d = f["differences_vs_jnp"]
    for k in d["fp8"]:
        print(f"  {k:22}{d['fp8'][k]:12.2e}{d['xla_fp8'][k]:12.2e}")
    t = f["training"]
    print(f"\ntraining: {t['steps']} Adam steps on one fixed batch, same init")
    for name, label in (("jnp", "jnp bf16"), ("fp8", "fp8_matmul")):
        print(f"  {label + ' loss':22}first {t['losses'][name][0]:.6g}   "
              f"last {t['losses'][name][-1]:.6g}")
    print(f"  max |fp8 - bf16| / bf16 over the run: {t['max_rel_loss_difference']:.2e}")


def main(argv=None):
    kernels = jax_hopper.kernels_available()
    args = parse_args(argv, bool(kernels))
    print(f"device: {jax.devices()[0].device_kind}")
    if not kernels:
        print(f"no Hopper kernels ({kernels.reason}): hopper_matmul runs its pure-JAX reference "
              "lowering, so the timings compare XLA with XLA (no speed-up shown; the numerical "
              "check still holds)")
        if args.fp8:
            print("fp8_matmul runs its reference too (fp8 rounding emulated in fp32) and XLA fp8 "
                  "the CPU's dot: the fp8 timings mean nothing here, the differences and the "
                  "training run do")
    results = run(args)
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
