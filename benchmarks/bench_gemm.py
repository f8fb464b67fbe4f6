"""bf16 GEMM side by side in one process: XLA's jnp.dot, Pallas Mosaic GPU's hopper_matmul_mgpu
and jax_hopper.hopper_matmul (default config plus --hopper-configs variants).

    python benchmarks/bench_gemm.py                      # default shapes, ~4 min on an H100
    python benchmarks/bench_gemm.py --quick              # three shapes, one Pallas config
    python benchmarks/bench_gemm.py --transformer        # one layer's GEMMs (fwd + bwd, 11 shapes)
    python benchmarks/bench_gemm.py --decode             # M = 1-64 against 4 weights (20 shapes)
    python benchmarks/bench_gemm.py --random 52 --impls xla,hopper   # shapes no issue lists
    python benchmarks/bench_gemm.py --decode --impls xla,hopper --device-time   # + device time
    python benchmarks/bench_gemm.py --shapes 8192x8192x8192 4096 \\
        --hopper-configs '[{"cluster_m": 2}, {"raster": "n", "group_size": 16}]'
    python benchmarks/bench_gemm.py --shapes 8192x4096x1024 --bias --activation gelu_tanh \\
        --impls xla,hopper --hopper-configs '[{"block_m": 128, "block_n": 128, "stages": 6,
        "schedule": "pingpong", "stream_k": false}]'   # the configs under a fused epilogue

Each shape's roofline floor is max(its FLOPs at the H100's dense bf16 peak, 989 TFLOP/s; its
operand and output bytes at 3.0 TB/s); the table gives each time as a % of it. With
--device-time each variant's device time per call is measured too (timing.device_times), and
"dev h/X" is hopper's speed over XLA's by it: below ~25 us a chained call's time is the host's.
With --bias and/or --activation every variant's product is followed by act(y + bias) (a (N,)
bias): hopper_matmul fuses it into its kernel, XLA and Pallas run it in jnp after their product
(XLA fuses it into the dot's consumer), and the reference is the same on the float32 product.
Writes gemm_<tag>.json (rewritten after every shape, "complete": false until the last) and
gemm_<tag>.png to --out-dir. Exit status 1 when hopper_matmul's
result is wrong (relative Frobenius error > 1e-2 or NaN) for some shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import inspect
import json
import math
import os
import sys

import jax
import jax.numpy as jnp

import timing

LARGE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 12288, 4096),
                (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]
DEFAULT_SHAPES = LARGE_SHAPES + [(4000, 3000, 2056), (256, 4096, 4096), (64, 12288, 4096)]
QUICK_SHAPES = [(4096, 4096, 4096), (8192, 4096, 14336), (256, 4096, 4096)]
# Decode: a few tokens against the weights of a 4096-wide model with a 14336-wide MLP (N x K).
DECODE_SHAPES = [(m, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096))
                 for m in (1, 8, 16, 32, 64)]
BF16_PEAK, HBM = 989e12, 3.0e12
ERR_LIMIT = 1e-2

# hopper_matmul_mgpu.TuningConfig fields. tile_m x tile_n is one consumer warpgroup's tile; the
# CTA has two, side by side along wg_dimension. Shared memory is about
# (cta_tile_m + cta_tile_n) * tile_k * steps * 2 B + 32 KB of epilogue, at most 227 KB: with a
# 128x256 CTA tile 4 steps fit, with 128x128 6 (jax 0.10.2 lowers all of these for cuda; 128x128
# per warpgroup with 5 steps is refused). M and N must divide by the CTA tile (times 2 along
# cluster_dimension), K by tile_k: small M needs tile_m 64 with wg_dimension N.
PALLAS_CONFIGS = {
    "mgpu_128x128x64_s4_wgN": dict(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4),
    "mgpu_128x128x64_s4_wgN_snakeN8": dict(tile_m=128, tile_n=128, tile_k=64,
                                           max_concurrent_steps=4, grid_minor_dim="N",
                                           grid_tile_width=8),
    "mgpu_128x128x64_s4_wgN_snakeN8_clusterM": dict(tile_m=128, tile_n=128, tile_k=64,
                                                    max_concurrent_steps=4, grid_minor_dim="N",
                                                    grid_tile_width=8, cluster_dimension="M"),
    "mgpu_64x256x64_s4_wgM_snakeN8": dict(tile_m=64, tile_n=256, tile_k=64,
                                          max_concurrent_steps=4, wg_dimension="M",
                                          grid_minor_dim="N", grid_tile_width=8),
    "mgpu_64x128x64_s6_wgM": dict(tile_m=64, tile_n=128, tile_k=64, max_concurrent_steps=6,
                                  wg_dimension="M"),
    "mgpu_64x128x64_s4_wgN": dict(tile_m=64, tile_n=128, tile_k=64, max_concurrent_steps=4),
}
_DIMENSION_FIELDS = ("grid_minor_dim", "wg_dimension", "cluster_dimension")


def log(*parts):
    print(*parts, flush=True)


parse_shape = timing.parse_shape


def transformer_shapes(text: str) -> list[tuple[int, int, int]]:
    """'TOKENS,D_MODEL,D_FF' -> the GEMMs of one decoder layer as examples/transformer_layer.py
    runs them (fused QKV, output, fused gate+up, down), forward then backward (dX = dY W^T,
    dW = X^T dY), each shape once."""
    try:
        t, d, f = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"transformer {text!r}: want TOKENS,D_MODEL,D_FF") from None
    projections = [(d, 3 * d), (d, d), (d, 2 * f), (f, d)]  # (in, out) of each weight
    forward = [(t, n, k) for k, n in projections]
    grad_x = [(t, k, n) for k, n in projections]
    grad_w = [(k, n, t) for k, n in projections]
    return list(dict.fromkeys(forward + grad_x + grad_w))


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """act(y + bias) after every variant's product y (--bias, --activation): fused into the
    hopper variants' kernel, in jnp after the others' product."""
    bias: bool = False
    activation: str | None = None

    def __post_init__(self):
        self.code  # an unknown activation fails here, before anything runs, naming the known

    @property
    def code(self) -> int:
        """The activation's kernel code (jax_hopper.gemm.epilogue: the names' one source)."""
        from jax_hopper.gemm.epilogue import activation_code
        return activation_code(self.activation)

    def __bool__(self) -> bool:
        return self.bias or self.activation is not None

    def operands(self, key, n: int) -> dict:
        """hopper_matmul's epilogue arguments for an N-column product: a random-normal bf16
        bias where asked for, and the activation."""
        bias = (jax.random.normal(key, (n,), jnp.float32).astype(jnp.bfloat16)
                if self.bias else None)
        return dict(bias=bias, activation=self.activation)

    def apply(self, y, operands: dict):
        """The same epilogue in jnp, in y's dtype (the reference passes a float32 y)."""
        from jax_hopper.gemm.epilogue import apply_activation
        if operands["bias"] is not None:
            y = y + operands["bias"].astype(y.dtype)
        return apply_activation(y, self.code)

    def wrap(self, variants: dict, impl_of: dict, operands: dict) -> dict:
        """Each variant followed by the epilogue: a hopper variant given it as arguments, the
        others applying it in jnp."""
        if not self:
            return variants
        return {name: ((lambda a, b, f=f: f(a, b, **operands)) if impl_of[name] == "hopper"
                       else (lambda a, b, f=f: self.apply(f(a, b), operands)))
                for name, f in variants.items()}


def pallas_variants(configs: dict) -> tuple[dict, dict]:
    """(name -> f(a, b), name -> reason skipped) for hopper_matmul_mgpu, whatever its version.

    Its entry point was matmul_kernel(a, b, config) in early 2025 releases and
    matmul(a, b, c, config) by jax 0.10 (c: an optional addend, None for a plain product).
    """
    if jax.default_backend() != "gpu":
        return {}, {name: "Mosaic GPU needs a CUDA GPU" for name in configs}
    try:
        from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as mgpu
        fn = getattr(mgpu, "matmul", None) or mgpu.matmul_kernel
        extra = {"c": None} if "c" in inspect.signature(fn).parameters else {}
        fields = {f.name for f in dataclasses.fields(mgpu.TuningConfig)}
    except Exception as e:  # noqa: BLE001 -- any failure here just means "not available"
        return {}, {name: f"hopper_matmul_mgpu unusable: {e!r}" for name in configs}
    variants, skipped = {}, {}
    for name, cfg in configs.items():
        if unknown := sorted(set(cfg) - fields):
            skipped[name] = f"TuningConfig of jax {jax.__version__} has no field {unknown}"
            continue
        cfg = {k: mgpu.MatmulDimension[v] if k in _DIMENSION_FIELDS and v else v
               for k, v in cfg.items()}
        try:
            tuning = mgpu.TuningConfig(**cfg)
        except (TypeError, ValueError) as e:
            skipped[name] = error_text(e)
            continue
        variants[name] = lambda a, b, tuning=tuning: fn(a, b, config=tuning, **extra)
    return variants, skipped


def hopper_variants(configs: list[dict]) -> tuple[dict, dict]:
    """'hopper' (the heuristic's choice) plus one 'hopper:<fields>' per explicit GemmConfig."""
    names = ["hopper"] + ["hopper:" + ",".join(f"{k}={v}" for k, v in c.items()) for c in configs]
    # An installed jax_hopper (which has the compiled extension) first; the source tree only as a
    # fallback, where every op lowers to its pure-JAX reference on a CPU.
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:  # lazily: the package may not import on this machine
        import jax_hopper
    except Exception as e:  # noqa: BLE001
        return {}, {name: f"import jax_hopper failed: {e!r}" for name in names}
    if jax.default_backend() == "gpu" and not jax_hopper._ffi.kernels_available():
        why = ("jax_hopper's kernels are not available (no Hopper GPU, or the extension is not "
               "built): hopper_matmul would time the XLA reference")
        return {}, {name: why for name in names}
    variants = {"hopper": jax_hopper.hopper_matmul}
    skipped = {}
    for name, fields in zip(names[1:], configs, strict=True):
        try:
            config = jax_hopper.GemmConfig(**fields)
        except TypeError as e:
            skipped[name] = str(e)
            continue
        variants[name] = (lambda a, b, config=config, **epilogue:
                          jax_hopper.hopper_matmul(a, b, config=config, **epilogue))
    return variants, skipped


def error_text(e: Exception) -> str:
    """The exception's type and first line (XLA and Mosaic errors run to pages)."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else repr(e)


def bench_shape(shape, variants: dict, skipped: dict, impl_of: dict, args, key,
                epilogue: Epilogue = Epilogue()) -> dict:
    m, n, k = shape
    set_bytes = (m * k + k * n) * 2
    n_calls, n_sets = timing.call_plan(m, n, k, args.calls, args.min_set_mb * 1e6)
    sets = timing.rotating_sets(key, m, n, k, n_sets)
    pairs = timing.rotation(sets, n_calls)
    operands = epilogue.operands(jax.random.fold_in(key, 1), n)
    variants = epilogue.wrap(variants, impl_of, operands)
    ref = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))(*sets[0])
    if epilogue:
        ref = epilogue.apply(ref, operands)
    log(f"  {n_sets} input sets ({n_sets * set_bytes / 1e6:.0f} MB), {n_calls} calls per run")

    results = {name: dict(impl=impl_of[name], error=reason) for name, reason in skipped.items()}
    # One failing variant must not stop the run: time_interleaved returns its exception.
    runs = {name: (timing.chained(f), pairs) for name, f in variants.items()}
    timed = timing.time_interleaved(runs, reps=args.reps)
    # Every variant that ran, on the device too: one trace, the variants in shuffled rounds.
    ran = {name: runs[name] for name, r in timed.items() if not isinstance(r, Exception)}
    device_s = (timing.device_times(ran, args.reps) if args.device_time and ran else None) or {}
    for name, r in timed.items():
        if not isinstance(r, Exception):
            try:
                err = float(timing.rel_fro_error(r["out"], ref))
            except Exception as e:  # noqa: BLE001
                r = e
        if isinstance(r, Exception):
            results[name] = dict(impl=impl_of[name], error=error_text(r))
            log(f"  {name:44s} skipped: {results[name]['error']}")
            continue
        wrong = not err <= ERR_LIMIT  # NaN compares false
        results[name] = dict(impl=impl_of[name], tflops=timing.tflops(m, n, k, r["median_s"]),
                             ms=r["median_s"] * 1e3, times_ms=[t * 1e3 for t in r["times_s"]],
                             compile_s=r["compile_s"], rel_err=err, wrong=wrong)
        device = ""
        if name in device_s:
            results[name]["device_us"] = device_s[name] * 1e6
            device = f"  device {device_s[name] * 1e6:7.1f} us"
        log(f"  {name:44s} {results[name]['tflops']:7.1f} TFLOP/s  {r['median_s'] * 1e6:9.1f} us"
            f"{device}  err {err:.1e}{'  WRONG' if wrong else ''}"
            f"  (first run {r['compile_s']:.1f} s)")
    return summarise(shape, n_sets, n_calls, results)


def _best(results: dict, impl: str):
    ok = {n: r for n, r in results.items() if r["impl"] == impl and "tflops" in r
          and not r["wrong"]}
    return max(ok, key=lambda n: ok[n]["tflops"]) if ok else None


def summarise(shape, n_sets, n_calls, results) -> dict:
    xla = results.get("xla", {}).get("tflops")
    hopper = results.get("hopper", {})
    best_pallas, best_hopper = _best(results, "pallas"), _best(results, "hopper")
    # "-": hopper not asked for; "ERR": it did not run; "FAIL": it ran and gave a wrong result.
    status = ("-" if "hopper" not in results else "ERR" if "tflops" not in hopper
              else "FAIL" if hopper["wrong"] else "ok")

    def ratio(name):
        t = results.get(name, {}).get("tflops") if name else None
        return t / xla if t and xla else None

    xla_device = results.get("xla", {}).get("device_us")
    hopper_device = hopper.get("device_us")

    m, n, k = shape
    floor_s = max(2 * m * n * k / BF16_PEAK, 2 * (m * k + k * n + m * n) / HBM)

    def of_floor(name):
        t = results.get(name, {}).get("ms") if name else None
        return floor_s * 1e3 / t if t else None

    return dict(shape=list(shape), flops=2 * math.prod(shape), floor_us=floor_s * 1e6,
                xla_of_floor=of_floor("xla"), hopper_of_floor=of_floor("hopper"),
                best_hopper_of_floor=of_floor(best_hopper), n_sets=n_sets, n_calls=n_calls,
                status=status, best_pallas=best_pallas, best_hopper=best_hopper,
                hopper_over_xla=ratio("hopper"), best_hopper_over_xla=ratio(best_hopper),
                best_pallas_over_xla=ratio(best_pallas),
                hopper_over_xla_device=(xla_device / hopper_device
                                        if xla_device and hopper_device else None),
                variants=results)


def fmt(x, spec):
    return f"{'-':>{spec.split('.')[0]}}" if x is None else format(x, spec)


def _variant(row, name, field):
    return row["variants"].get(name, {}).get(field) if name else None


def print_table(rows):
    log(f"\n{'shape':18s} {'floor us':>8s} {'XLA':>7s} {'Pallas':>7s} {'hopper':>7s} {'h/XLA':>6s}"
        f" {'h-best':>7s} {'hb/XLA':>6s} {'x%flr':>5s} {'h%flr':>5s} {'dev h/X':>7s}"
        f" {'err':>8s} {'status':6s} best Pallas | best hopper")
    pct = "5.0%"
    for r in rows:
        log(f"{shape_name(r['shape']):18s} {r['floor_us']:8.1f}"
            f" {fmt(_variant(r, 'xla', 'tflops'), '7.1f')}"
            f" {fmt(_variant(r, r['best_pallas'], 'tflops'), '7.1f')}"
            f" {fmt(_variant(r, 'hopper', 'tflops'), '7.1f')} {fmt(r['hopper_over_xla'], '6.2f')}"
            f" {fmt(_variant(r, r['best_hopper'], 'tflops'), '7.1f')}"
            f" {fmt(r['best_hopper_over_xla'], '6.2f')} {fmt(r['xla_of_floor'], pct)}"
            f" {fmt(r['hopper_of_floor'], pct)} {fmt(r.get('hopper_over_xla_device'), '7.2f')}"
            f" {fmt(_variant(r, 'hopper', 'rel_err'), '8.1e')} {r['status']:6s}"
            f" {r['best_pallas'] or '-'} | {r['best_hopper'] or '-'}")


def large_shape_summary(rows) -> dict:
    """Geometric mean and minimum of hopper/XLA over the six large shapes that were run."""
    out = {}
    for key in ("hopper_over_xla", "best_hopper_over_xla"):
        ratios = {shape_name(r["shape"]): r[key] for r in rows
                  if tuple(r["shape"]) in LARGE_SHAPES and r[key]}
        if ratios:
            worst = min(ratios, key=ratios.get)
            out[key] = dict(geomean=timing.geomean(ratios.values()), min=ratios[worst],
                            min_shape=worst, n_shapes=len(ratios))
    return out


def environment() -> dict:
    dev = jax.devices()[0]
    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = None
    return dict(device=dev.device_kind, platform=dev.platform,
                platform_version=getattr(dev.client, "platform_version", None),
                jax=jax.__version__, jaxlib=jaxlib,
                xla_flags=os.environ.get("XLA_FLAGS", ""),
                date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                argv=sys.argv[1:])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", type=parse_shape, help="MxNxK (or N for a cube) ...")
    p.add_argument("--transformer", nargs="?", const="8192,4096,14336", type=transformer_shapes,
                   metavar="TOKENS,D_MODEL,D_FF",
                   help="the forward and backward GEMMs of one transformer layer "
                        "(default 8192,4096,14336: examples/transformer_layer.py's size)")
    p.add_argument("--decode", action="store_true",
                   help="M = 1, 8, 16, 32, 64 against N x K = 4096 x 4096, 14336 x 4096, "
                        "4096 x 14336 and 28672 x 4096")
    p.add_argument("--random", type=int, default=0, metavar="COUNT",
                   help="about COUNT shapes drawn with --random-seed (timing.random_shapes; 52 "
                        "with seed 27 is the 2026-11-27 sweep), summarised by M class")
    p.add_argument("--random-seed", type=int, default=27)
    p.add_argument("--quick", action="store_true",
                   help=f"shapes {', '.join(map(shape_name, QUICK_SHAPES))} and one Pallas config")
    p.add_argument("--impls", default="xla,pallas,hopper", help="comma list of xla,pallas,hopper")
    p.add_argument("--hopper-configs", type=json.loads, default=[],
                   help='JSON list of GemmConfig field dicts, e.g. \'[{"cluster_m": 2}]\'')
    p.add_argument("--bias", action="store_true",
                   help="a (N,) bias added to every variant's product (Epilogue)")
    p.add_argument("--activation", default=None,
                   help="an activation after every variant's product (and bias): "
                        "hopper_matmul's names (relu, gelu_tanh, gelu, silu)")
    p.add_argument("--pallas-configs", type=json.loads, default=None,
                   help="JSON object name -> TuningConfig fields, replacing the built-in list")
    p.add_argument("--reps", type=int, default=7, help="timed runs per variant (median)")
    p.add_argument("--calls", type=int, default=0, help="calls per run (default: ~30 ms worth)")
    p.add_argument("--min-set-mb", type=float, default=200.0,
                   help="rotating input sets together exceed this many MB")
    p.add_argument("--device-time", action="store_true",
                   help="also each variant's device time per call, from one profiler trace "
                        "(timing.device_times; the 'dev h/X' column): chained short calls are "
                        "bound by the host")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "results"))
    p.add_argument("--tag", type=timing.expand_tag,
                   default="{gpu}_" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    shapes = (args.shapes or args.transformer or (DECODE_SHAPES if args.decode else None) or
              (timing.random_shapes(args.random, args.random_seed) if args.random else None) or
              (QUICK_SHAPES if args.quick else DEFAULT_SHAPES))
    impls = set(args.impls.split(","))
    pallas_cfgs = args.pallas_configs or PALLAS_CONFIGS
    if args.quick and args.pallas_configs is None:
        pallas_cfgs = dict(list(PALLAS_CONFIGS.items())[:1])

    variants, skipped = ({"xla": jnp.dot} if "xla" in impls else {}), {}
    impl_of = {"xla": "xla"}
    for impl, build, cfgs in (("pallas", pallas_variants, pallas_cfgs),
                              ("hopper", hopper_variants, args.hopper_configs)):
        if impl in impls:
            v, s = build(cfgs)
            variants.update(v)
            skipped.update(s)
            impl_of.update(dict.fromkeys([*v, *s], impl))
    epilogue = Epilogue(args.bias, args.activation)
    env = environment()
    log(f"{env['device']} ({env['platform_version']}), jax {env['jax']}; "
        f"{len(shapes)} shapes, variants: {', '.join(variants) or 'none'}"
        + (f"; each product followed by {epilogue}" if epilogue else ""))
    for name, reason in skipped.items():
        log(f"  {name}: not run: {reason}")

    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"gemm_{args.tag}")
    rows = []
    for i, shape in enumerate(shapes):
        log(f"[{i + 1}/{len(shapes)}] {shape_name(shape)}")
        key = jax.random.fold_in(jax.random.key(args.seed), i)
        rows.append(bench_shape(shape, variants, skipped, impl_of, args, key, epilogue))
        timing.write_run_json(stem + ".json", complete=False, environment=env,
                              epilogue=dataclasses.asdict(epilogue), shapes=rows)

    print_table(rows)
    summary = large_shape_summary(rows)
    for key, label in (("hopper_over_xla", "hopper (default)"),
                       ("best_hopper_over_xla", "hopper (best config)")):
        if s := summary.get(key):
            log(f"{label} / XLA over {s['n_shapes']} large shapes: geomean {s['geomean']:.3f}, "
                f"min {s['min']:.3f} ({s['min_shape']})")

    classes = (timing.class_summary(rows, lambda r: r["hopper_over_xla"])
               if args.random else {})
    for name, c in classes.items():
        log(f"hopper (default) / XLA, {name}: geomean {c['geomean']:.3f} over {c['n_shapes']} "
            f"shapes, {c['min']:.2f}-{c['max']:.2f}")

    timing.write_run_json(stem + ".json", complete=True, environment=env,
                          epilogue=dataclasses.asdict(epilogue), shapes=rows,
                          large_shape_summary=summary, m_class_summary=classes)
    import plot  # matplotlib only now: a missing one must not cost the numbers above
    plot.plot_results(rows, stem + ".png", title=f"bf16 GEMM, {env['device']}, jax {env['jax']}")
    log(f"wrote {stem}.json and {stem}.png")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
