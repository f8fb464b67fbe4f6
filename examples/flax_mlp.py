"""A flax (nnx) MLP trained with jax_hopper.dot_general in its Linear layers, next to the same
model with flax's default, from the same initial parameters on the same data.

    python examples/flax_mlp.py [--steps 50]

Prints both loss curves and the median step time of each, and exits non-zero if the two
trainings part ways (final losses more than 5% apart). On a machine without the kernels both
models run XLA's dot and the timings compare XLA with XLA.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

import jax_hopper


class MLP(nnx.Module):
    def __init__(self, d_in, d_hidden, d_out, dot_general, rngs):
        dense = dict(dtype=jnp.bfloat16, param_dtype=jnp.float32, dot_general=dot_general,
                     rngs=rngs)
        self.up = nnx.Linear(d_in, d_hidden, **dense)
        self.down = nnx.Linear(d_hidden, d_out, **dense)

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


def train(dot_general, data, sizes, steps, lr):
    x, y = data
    model = MLP(*sizes, dot_general=dot_general, rngs=nnx.Rngs(0))

    @nnx.jit
    def step(model):
        def loss_fn(m):
            return jnp.mean(jnp.square(m(x).astype(jnp.float32) - y))
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        params = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - lr * g, params, grads))
        return loss

    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(float(step(model)))  # float() waits for the step
        times.append(time.perf_counter() - start)
    return losses, statistics.median(times[1:])  # the first step compiles


def main(argv=None) -> int:
    kernels = jax_hopper.kernels_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)
    # tokens, d_in, d_hidden, d_out: a transformer MLP's shape on a GPU, small on a CPU.
    tokens, *sizes = (8192, 1024, 4096, 1024) if kernels else (256, 64, 256, 64)
    print(f"device: {jax.devices()[0].device_kind}; kernels: {kernels.reason}")
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (tokens, sizes[0]), jnp.float32).astype(jnp.bfloat16)
    target = jnp.tanh(x.astype(jnp.float32) @ jax.random.normal(kw, (sizes[0], sizes[2])) * 0.1)
    runs = {name: train(dot, (x, target), sizes, args.steps, args.lr)
            for name, dot in (("lax.dot_general", lax.dot_general),
                              ("jax_hopper.dot_general", jax_hopper.dot_general))}
    (l_lax, t_lax), (l_ours, t_ours) = runs.values()
    print(f"MLP {sizes[0]} -> {sizes[1]} -> {sizes[2]}, {tokens} tokens, bf16, SGD lr {args.lr}")
    print(f"{'step':>6}{'loss (lax)':>14}{'loss (jax_hopper)':>20}")
    for i in sorted({0, 1, 2, args.steps // 2, args.steps - 1}):
        print(f"{i:>6}{l_lax[i]:14.5f}{l_ours[i]:20.5f}")
    print(f"median step: lax {t_lax * 1e3:.3f} ms, jax_hopper {t_ours * 1e3:.3f} ms"
          + ("" if kernels else " (no kernels here: both are XLA)"))
    gap = abs(l_ours[-1] - l_lax[-1]) / l_lax[-1]
    ok = gap <= 0.05 and l_ours[-1] < l_ours[0]
    print(f"final losses {gap:.1%} apart; loss fell {l_ours[0]:.4f} -> {l_ours[-1]:.4f}: "
          f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
