"""Which kernels a program runs on a Hopper GPU, checked without one: a child process shows
jax_hopper a stand-in H100 (jax.devices("gpu") and the resident-cluster query are the only
things the lowering asks the device), lowers public calls for the CUDA platform and lists the
custom calls each program holds. Each product must reach its kernel family, forward and
backward, at aligned and unaligned shapes alike, with no XLA dot left for a product (a silent
fallback would show as one)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jax_hopper.gemm import primitive

pytestmark = pytest.mark.extension

_CHILD = textwrap.dedent('''
    import json, re
    import jax

    class StandInH100:
        platform, compute_capability = "gpu", "9.0"
        device_kind, local_hardware_id, id = "NVIDIA H100 80GB HBM3", 0, 0

    real = jax.devices
    jax.devices = lambda backend=None: [StandInH100()] if backend == "gpu" else real(backend)
    import jax_hopper._ffi as ffi  # computes which lowering each primitive registers
    ffi.register_targets = lambda: True
    ffi.resident_clusters = lambda kernel, cluster_size: 132 // cluster_size
    jax.devices = real
    import jax.numpy as jnp
    import jax_hopper as jh

    bf16, f32 = jnp.bfloat16, jnp.float32
    gs = jnp.asarray([300, 0, 500, 200], jnp.int32)

    def loss(f):
        return lambda *a: jax.grad(lambda *a: f(*a).astype(f32).sum(), range(len(a)))(*a)

    programs = {
        "matmul": (jh.hopper_matmul, (4096, 1024), (1024, 2048)),
        "matmul_decode": (jh.hopper_matmul, (8, 4096), (4096, 4096)),
        "matmul_unaligned_grad": (loss(jh.hopper_matmul), (1000, 1500), (1500, 1000)),
        # a vocabulary of odd width stored (K, N): read in place at decode and up to 384 rows
        # (heuristics.ODD_WEIGHT_MAX_M, pitch.shifted_weight_tile), copied into a padded pitch
        # past it
        "matmul_decode_odd_vocab": (jh.hopper_matmul, (8, 760), (760, 50257)),
        "matmul_odd_vocab_384": (jh.hopper_matmul, (384, 760), (760, 50257)),
        "matmul_odd_vocab": (jh.hopper_matmul, (4096, 768), (768, 50257)),
        "ragged_grad": (loss(lambda x, w: jh.ragged_dot(x, w, gs)), (1024, 512), (4, 512, 768)),
        "ragged_unaligned_grad": (loss(lambda x, w: jh.ragged_dot(x, w, gs)), (1024, 500),
                                  (4, 500, 750)),
        "ragged_glu": (lambda x, w: jh.hopper_ragged_glu(x, w, gs), (1024, 512),
                       (4, 512, 2, 384)),
        "fp8_matmul_grad": (loss(jh.fp8_matmul), (1024, 512), (512, 768)),
        "fp8_ragged_tensor_grad": (loss(lambda x, w: jh.fp8_ragged_dot(x, w, gs)),
                                   (1024, 512), (4, 512, 768)),
        "fp8_ragged_block_grad": (loss(lambda x, w: jh.fp8_ragged_dot(x, w, gs, recipe="block")),
                                  (1024, 512), (4, 512, 768)),
        "vmap_matmul_grad": (loss(jax.vmap(jh.hopper_matmul, (0, None))), (3, 256, 512),
                             (512, 384)),
        "vmap_ragged": (jax.vmap(lambda x, w: jh.ragged_dot(x, w, gs), (0, None)),
                        (2, 1000, 256), (4, 256, 384)),
    }
    # Random shapes (seeded): every public product must lower to kernels at any of them.
    rng = __import__("numpy").random.default_rng(0)

    def dim(lo=1, hi=3000):
        return int(rng.choice([rng.integers(lo, 65), rng.integers(lo, hi)]))
    for i in range(40):
        m, n, k, g = dim(), dim(8), dim(), int(rng.integers(1, 40))
        sizes = jnp.asarray(rng.multinomial(m, [1 / g] * g), jnp.int32)
        kind = ["matmul_t", "ragged", "ragged_nk", "fp8", "fp8_block", "fp8_ragged"][i % 6]
        f, shapes = {
            "matmul_t": (lambda a, b: jh.hopper_matmul(a, b, transpose_a=True), [(k, m), (k, n)]),
            "ragged": (loss(lambda x, w, s=sizes: jh.ragged_dot(x, w, s)), [(m, k), (g, k, n)]),
            "ragged_nk": (lambda x, w, s=sizes: jh.hopper_ragged_dot(x, w, s, transpose_rhs=True),
                          [(m, k), (g, n, k)]),
            "fp8": (loss(jh.fp8_matmul), [(m, k), (k, n)]),
            "fp8_block": (loss(lambda x, w: jh.fp8_matmul(x, w, recipe="block")), [(m, k), (k, n)]),
            "fp8_ragged": (loss(lambda x, w, s=sizes: jh.fp8_ragged_dot(x, w, s)),
                           [(m, k), (g, k, n)]),
        }[kind]
        programs[f"random_{i}_{kind}_{m}x{n}x{k}x{g}"] = (f, *shapes)
    out = {}
    for name, (f, *shapes) in programs.items():
        args = [jax.ShapeDtypeStruct(s, bf16) for s in shapes]
        text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        out[name] = dict(calls=sorted(set(re.findall(r"custom_call @(\\w+)", text))),
                         dots=len(re.findall(r"stablehlo\\.dot_general", text)),
                         pads=re.findall(r"stablehlo\\.pad .*-> tensor<([^>]*)>", text))
    print("RESULT " + json.dumps(out))
''')

GEMM = "jax_hopper_gemm_"
EXPECTED = {
    "matmul": {GEMM + "matmul"},
    "matmul_decode": {GEMM + "matmul_swap"},
    "matmul_unaligned_grad": {GEMM + "matmul"},
    "matmul_decode_odd_vocab": {GEMM + "matmul_swap_odd"},
    "matmul_odd_vocab_384": {GEMM + "matmul_swap_odd"},
    "matmul_odd_vocab": {GEMM + "matmul"},
    "ragged_grad": {"jax_hopper_grouped_tile_table", GEMM + "grouped",
                    GEMM + "grouped_contraction"},
    "ragged_unaligned_grad": {"jax_hopper_grouped_tile_table", GEMM + "grouped",
                              GEMM + "grouped_contraction"},
    "ragged_glu": {"jax_hopper_grouped_tile_table", GEMM + "grouped_glu"},
    # 1024 rows against a 768-wide weight, and each gradient's product as narrow: all swapped
    # (heuristics.swap_for_narrow_weight)
    "fp8_matmul_grad": {"jax_hopper_quantize_fp8", GEMM + "fp8_swap"},
    "fp8_ragged_tensor_grad": {"jax_hopper_quantize_fp8", "jax_hopper_grouped_tile_table",
                               GEMM + "grouped_fp8", GEMM + "grouped_contraction_fp8"},
    "fp8_ragged_block_grad": {"jax_hopper_quantize_fp8", "jax_hopper_grouped_tile_table",
                              GEMM + "grouped_fp8_block", GEMM + "grouped_contraction_fp8_block"},
    # 768 rows against a 384-wide weight, dx against 512: narrow, so swapped; dw reads x as
    # (K, M) (no swapped kernel)
    "vmap_matmul_grad": {GEMM + "matmul", GEMM + "matmul_swap"},
    "vmap_ragged": {"jax_hopper_grouped_tile_table", GEMM + "grouped"},
}


@pytest.fixture(scope="module")
def lowered():
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu",
                                            "PYTHONPATH": os.pathsep.join(sys.path)})
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, proc.stderr[-3000:]
    return json.loads(results[0][len("RESULT "):])


@pytest.mark.parametrize("program", list(EXPECTED))
def test_each_product_lowers_to_its_kernels_and_no_xla_dot(lowered, program):
    # a family's target, whether or not its plan splits tiles (primitive.gemm_target)
    assert {c.removesuffix("_split") for c in lowered[program]["calls"]} == EXPECTED[program]
    assert lowered[program]["dots"] == 0


def test_only_plans_that_split_tiles_take_the_target_that_prepares_the_flags(lowered):
    # A decode product's few weight tiles are split into pieces (the last-arrival split),
    # whose ready flags the "_split" target's initialize stage prepares; a large product's
    # whole tiles (4096 x 2048: 256 tiles of 128 x 256 in two waves) need none, and its target
    # has no such stage (ffi/module.cc).
    assert lowered["matmul_decode"]["calls"] == [GEMM + "matmul_swap_split"]
    assert lowered["matmul"]["calls"] == [GEMM + "matmul"]
    plan = dict(sk_clusters=0)
    assert primitive.gemm_target("fp8", plan) == GEMM + "fp8"
    assert primitive.gemm_target("fp8", {**plan, "sk_clusters": 3}) == GEMM + "fp8_split"


def test_products_at_random_shapes_lower_to_kernels_and_no_xla_dot(lowered):
    # 40 seeded shapes (1 to 3000 rows, columns and K; 1 to 39 groups) of the dense (a stored
    # (K, M)), grouped, fp8 and grouped fp8 products, forward and backward.
    random = {name: r for name, r in lowered.items() if name.startswith("random_")}
    assert len(random) == 40
    for name, r in random.items():
        assert any(c.startswith(GEMM) for c in r["calls"]) and r["dots"] == 0, (name, r)


def test_an_odd_width_weight_is_read_in_place_at_decode(lowered):
    # (K, N) with N = 50257: at 8 and 384 rows the matmul_swap_odd kernels read it as stored,
    # nothing padded but the output (computed 50264 wide and sliced, no pad op); at 4096 rows
    # it is copied into a padded pitch (the copy is small next to the product).
    assert lowered["matmul_decode_odd_vocab"]["pads"] == []
    assert lowered["matmul_odd_vocab_384"]["pads"] == []
    assert lowered["matmul_odd_vocab"]["pads"] == ["1x768x50264xbf16"]
