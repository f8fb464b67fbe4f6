"""A pre-norm transformer decoder block whose dense projections run on jax_hopper, checked
against and timed beside the same block written with jnp matmuls.

    python examples/transformer_layer.py [--d-model 4096] [--d-ff 14336] [--heads 32]
        [--batch 4] [--seq 2048] [--reps 10] [--attention cudnn|xla] [--seed 0] [--json PATH]

Block: x += W_o attn(RMSNorm(x) W_qkv); x += W_down (silu(h W_gate) * (h W_up)), h = RMSNorm(x),
with causal attention from jax.nn.dot_product_attention. Both versions share the parameters and
the code (`make_layer`); only the projection functions differ: hopper_matmul (residual adds
fused) and hopper_glu for the gated MLP input, against jnp. Each version runs a jitted
forward pass and a jitted training step (fp32 mean-square loss against a random target,
jax.value_and_grad, a hand-written Adam update). Prints median times, tokens/s, the speedup of
hopper_matmul over jnp, and the relative differences of output, loss and every parameter
gradient between the versions; exits with status 1 when one is above its bound.

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
from jax_hopper import hopper_glu, hopper_matmul

F32 = jnp.float32

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


def hopper_swiglu(h, w_gate_up):
    """silu(h W_gate) * (h W_up) in one hopper_glu launch: (d, 2 d_ff) read as (d, 2, d_ff), the
    same halves jnp.split takes; the (tokens, 2 d_ff) product is never written. Under jax.grad
    hopper_glu runs unfused and keeps the product for the backward pass (gate and up are needed
    there; recomputing them would cost the whole GEMM again)."""
    return hopper_glu(h, w_gate_up.reshape(w_gate_up.shape[0], 2, -1))


def swiglu_from(dense):
    """The unit as a user would write it: one `dense` product of (d, 2 d_ff), split, silu in
    fp32, rounded once."""
    def swiglu(h, w_gate_up):
        gate, up = jnp.split(dense(h, w_gate_up), 2, axis=-1)
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

    def layer(p, x):  # p: init_params' dict; x: (batch, seq, d_model) bf16
        b, t, d = x.shape
        x2 = x.reshape(b * t, d)
        qkv = dense(rms_norm(x2, p["ln1"]), p["w_qkv"])
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(b, t, heads, d // heads) for i in range(3))
        o = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=attention)
        x2 = dense(o.reshape(b * t, d), p["w_o"], residual=x2)
        h = swiglu(rms_norm(x2, p["ln2"]), p["w_gate_up"])
        x2 = dense(h, p["w_down"], residual=x2)
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
    """fp32 moments: bf16 would round away most of (1 - b2) * g^2."""
    zeros = jax.tree.map(lambda w: jnp.zeros(w.shape, F32), p)
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
        p, opt_state = adam_update(p, g, opt_state)
        return p, opt_state, loss
    return train_step


def median_seconds(runs, reps, warmup=2):
    """{name: f} -> {name: median wall time of f()}, after warm-up calls (the first compiles).

    The timed calls go round robin, the order rotated every round: a GPU's clock drifts with
    its temperature and power draw by several percent over seconds, and timed one after the
    other, one version would get the cool GPU and the other the hot one.
    """
    for f in runs.values():
        for _ in range(warmup):
            jax.block_until_ready(f())
    times = {name: [] for name in runs}
    names = list(runs)
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            jax.block_until_ready(runs[name]())
            times[name].append(time.perf_counter() - start)
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
    args = ap.parse_args(argv)
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    return args


def run(args):
    """Builds, checks and times both versions; returns the results as a dict."""
    kp, kx, kt = jax.random.split(jax.random.key(args.seed), 3)
    params = init_params(kp, args.d_model, args.d_ff)
    x = jax.random.normal(kx, (args.batch, args.seq, args.d_model), F32).astype(jnp.bfloat16)
    target = jax.random.normal(kt, x.shape, F32)
    opt_state = adam_init(params)

    # Every timed train step starts from the same params (the step is a pure function), so
    # both versions time identical work.
    versions = {"hopper": (hopper_dense, hopper_swiglu), "jnp": (jnp_dense, None)}
    outs, losses, grads, runs = {}, {}, {}, {}
    for name, (dense, swiglu) in versions.items():
        layer = make_layer(dense, args.heads, args.attention, swiglu)
        forward = jax.jit(layer)
        train_step = jax.jit(make_train_step(layer))
        outs[name] = forward(params, x)
        losses[name], grads[name] = jax.jit(jax.value_and_grad(
            functools.partial(mse_loss, layer)))(params, x, target)
        runs[name, "forward_s"] = functools.partial(forward, params, x)
        runs[name, "train_step_s"] = functools.partial(train_step, params, opt_state, x, target)
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
    return dict(
        config={k: getattr(args, k) for k in
                ("d_model", "d_ff", "heads", "batch", "seq", "reps", "attention", "seed")},
        device=jax.devices()[0].device_kind, hopper=kernels,
        dtype="bfloat16", tokens=tokens, output_shape=list(outs["hopper"].shape),
        loss={"hopper": loss_h, "jnp": loss_j},
        times_s=times,
        tokens_per_s={n: {k: tokens / t for k, t in ts.items()} for n, ts in times.items()},
        # Without the kernels both sides are XLA: no speed-up to report.
        **({"speedup": {k: times["jnp"][k] / times["hopper"][k] for k in times["jnp"]}}
           if kernels else {}),
        errors=errors, bounds=bounds,
        passed=all(math.isfinite(e) and e <= bounds[k] for k, e in errors.items()))


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


def main(argv=None):
    kernels = jax_hopper.kernels_available()
    args = parse_args(argv, bool(kernels))
    print(f"device: {jax.devices()[0].device_kind}")
    if not kernels:
        print(f"no Hopper kernels ({kernels.reason}): hopper_matmul runs its pure-JAX reference "
              "lowering, so the timings compare XLA with XLA (no speed-up shown; the numerical "
              "check still holds)")
    results = run(args)
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
