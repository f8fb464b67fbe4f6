"""hopper_matmul inside jax.jit, checked against jnp.dot and timed side by side.

    python examples/matmul.py [M N K]

Without a Hopper GPU it runs the reference lowering on CPU (and says so).
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_hopper import hopper_matmul, kernels_available


def timed(f, *args, reps=20):
    f(*args).block_until_ready()
    start = time.perf_counter()
    for _ in range(reps):
        out = f(*args)
    out.block_until_ready()
    return (time.perf_counter() - start) / reps


def main():
    kernels = kernels_available()
    m, n, k = (int(x) for x in sys.argv[1:4]) if len(sys.argv) == 4 else (
        (8192, 8192, 8192) if kernels else (512, 512, 512))
    print(f"device: {jax.devices()[0].device_kind}"
          + ("" if kernels else f" ({kernels.reason}: running the reference lowering)"))
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    ours = jax.jit(lambda a, b: hopper_matmul(a, b, bias=jnp.ones((n,), jnp.bfloat16),
                                              activation="relu"))
    xla = jax.jit(lambda a, b: jax.nn.relu(jnp.dot(a, b) + jnp.ones((n,), jnp.bfloat16)))
    got = np.asarray(ours(a, b), np.float64)
    want = np.asarray(xla(a, b), np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    t_ours, t_xla = timed(ours, a, b), timed(xla, a, b)
    flops = 2 * m * n * k
    print(f"relu(a @ b + bias), {m}x{n}x{k} bf16: rel. Frobenius difference {err:.2e}")
    print(f"  hopper_matmul {t_ours * 1e3:8.3f} ms  {flops / t_ours / 1e12:7.1f} TFLOP/s")
    print(f"  jnp.dot       {t_xla * 1e3:8.3f} ms  {flops / t_xla / 1e12:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
