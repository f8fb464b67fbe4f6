"""fp8 GEMMs side by side in one process: hopper_fp8_matmul against XLA.

    python benchmarks/bench_fp8.py [--scaling tensor|block] [--shapes MxNxK ... | --random N]
                                   [--sweep] [--configs JSON] [--device-time]
                                   [--out-dir DIR] [--tag TAG]

Operands are random-normal, quantized once to float8_e4m3fn, a as (M, K) and b as (N, K) (both
K-major, the layout fp8 wgmma reads); bf16 output. --scaling tensor (per-tensor scales):
    hopper           hopper_fp8_matmul(a, b, a_scale, b_scale), the default config
    cfg ...          each compiled fp8 config (--sweep: every tile x cluster), and each of
                     --configs (GemmConfig fields, e.g. a swap-AB tile)
    xla_fp8          XLA at its best of two spellings: lax.dot_general on the fp8 operands with
                     a bf16 result, scaled after; and the dequantize-then-dot pattern XLA's GEMM
                     rewriter turns into cuBLASLt's scaled fp8 GEMM
--scaling block (DeepSeek-V3's recipe: a scale per row of a and 128 of K, one per 128 x 128
block of b):
    hopper           hopper_fp8_matmul with the block scales (the fp8_block family)
    cfg ...          each compiled fp8_block config (--sweep)
    jax_dequant      the block scales written in JAX: dequantise both operands to bf16, then
                     XLA's bf16 dot (no fast path exists for this in XLA)
    hopper_tensor    our per-tensor kernel on the same fp8 data (speed only: its product is
                     another one, unchecked), for the cost of promoting each k-block
--b-layout kn (per tensor): b stored (K, N), as flax stores a weight, which fp8 wgmma cannot read:
    hopper           from b in bf16: quantize_fp8(b, transpose=True) (one pass writing the K-major
                     copy), then hopper_fp8_matmul; the quantization is inside the timed call
    xla_fp8_kn       XLA on a and an fp8 b already stored (K, N): lax.dot_general, scaled after
                     (XLA transposes where cuBLASLt needs it); no quantization timed
    xla_fp8_kn_quant the same from b in bf16, quantized in jnp inside the call (as ours)
    hopper_fp8_kn    hopper_fp8_matmul(transpose_b=False) on the fp8 (K, N) copy: transpose_fp8
                     (our kernel) makes the K-major copy inside the timed call; the column
                     "fp8 kn" is its speed over xla_fp8_kn, the same operands
    The check's reference quantizes b from float32; both variants that start from its bf16 copy
    round twice and sit ~1e-2 from it (under the limit).
--random N draws about N shapes no issue lists (timing.random_shapes: M 1-8192, N and K from
model widths, a quarter of them not multiples of 64) and summarises hopper over its peer by M class.
Rotating input sets larger than L2 (scales rotate with their operands), medians of interleaved
runs (jax_hopper.timing); --device-time adds each variant's device time per call from one
profiler trace (timing.device_times: chained short calls are bound by the host) and the
default's ratio over the best peer by it ("dev h/p"). The floor is max(FLOPs at the H100's
dense fp8 peak, 1979 TFLOP/s; operand and output bytes at 3.0 TB/s). Writes fp8_<tag>.json
(fp8_block_<tag>.json), rewritten after every shape ("complete": false until the last); exit
status 1 when a checked variant's result is wrong (each printed as it is found). Writes
fp8_kn_<tag>.json with --b-layout kn.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys

import jax
import jax.numpy as jnp

import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
from jax_hopper import GemmConfig, hopper_fp8_matmul  # noqa: E402
from jax_hopper.kernels import catalog  # noqa: E402

SHAPES = ((8192, 8192, 8192), (4096, 7168, 2048), (4096, 4096, 7168), (4096, 7168, 16384),
          (256, 4096, 4096), (64, 12288, 4096))
FP8_PEAK = 1979e12
HBM = 3.0e12
ERR_LIMIT = 2e-2  # bf16 output of an fp8 product against float32 of the same fp8 values
E4M3, BF16 = jnp.float8_e4m3fn, jnp.bfloat16
NT = (((1,), (1,)), ((), ()))  # a (M, K) . b (N, K) over K
NN = (((1,), (0,)), ((), ()))  # a (M, K) . b (K, N) over K


def floor_s(m, n, k):
    return max(2 * m * n * k / FP8_PEAK, (m * k + n * k + 2 * m * n) / HBM)


@jax.jit
def _quantize(x):
    scale = jnp.max(jnp.abs(x)) / catalog.FP8_MAX["float8_e4m3fn"]
    return (x / scale).astype(E4M3), scale.astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=1)
def _quantize_blocks(x, rows_per_scale):
    """x (R, K) to e4m3 with one scale per rows_per_scale rows and 128 of K (ceil)."""
    blk = catalog.FP8_SCALE_BLOCK
    r, k = x.shape
    rb, kb = -(-r // rows_per_scale), -(-k // blk)
    xp = jnp.pad(x, ((0, rb * rows_per_scale - r), (0, kb * blk - k)))
    xp = xp.reshape(rb, rows_per_scale, kb, blk)
    scale = jnp.max(jnp.abs(xp), axis=(1, 3)) / catalog.FP8_MAX["float8_e4m3fn"]
    scale = jnp.where(scale > 0, scale, 1.0)
    q = (xp / scale[:, None, :, None]).reshape(rb * rows_per_scale, kb * blk)[:r, :k]
    return q.astype(E4M3), scale.astype(jnp.float32)


def dequantize(x, scale, rows_per_scale):
    """x (R, K) e4m3 times its block scales, float32."""
    s = jnp.repeat(jnp.repeat(scale, catalog.FP8_SCALE_BLOCK, axis=1), rows_per_scale, axis=0)
    return x.astype(jnp.float32) * s[:x.shape[0], :x.shape[1]]


def fp8_sets(key, m, n, k, n_sets, scaling):
    """n_sets (a, b) pairs, each operand an (fp8 array, scale) pair: a (M, K), b (N, K) e4m3
    quantized per tensor, or per block (a: a row and 128 of K; b: 128 x 128). Scaling "kn": b
    is (b in bf16 (K, N), its fp8 copy (K, N), the scale)."""
    sets = []
    for kk in jax.random.split(key, n_sets):
        ka, kb = jax.random.split(kk)
        xa = jax.random.normal(ka, (m, k), jnp.float32)
        xb = jax.random.normal(kb, (n, k), jnp.float32)
        if scaling == "kn":
            sets.append((_quantize(xa), (xb.T.astype(BF16), *_quantize(xb.T))))
        elif scaling == "block":
            sets.append((_quantize_blocks(xa, 1), _quantize_blocks(xb, catalog.FP8_SCALE_BLOCK)))
        else:
            sets.append((_quantize(xa), _quantize(xb)))
    jax.block_until_ready(sets)
    return sets


def reference(a, b, scaling):
    """float32 product of the dequantised operands (each an (fp8 array, scale) pair)."""
    if scaling == "kn":
        x, y = a[0].astype(jnp.float32) * a[1], b[1].astype(jnp.float32) * b[2]
        return jax.lax.dot_general(x, y, NN, precision=jax.lax.Precision.HIGHEST)
    if scaling == "block":
        x, y = dequantize(*a, 1), dequantize(*b, catalog.FP8_SCALE_BLOCK)
    else:
        x, y = a[0].astype(jnp.float32) * a[1], b[0].astype(jnp.float32) * b[1]
    return jax.lax.dot_general(x, y, NT, precision=jax.lax.Precision.HIGHEST)


def block_variants(configs):
    def jax_dequant(a, b):
        x = dequantize(*a, 1).astype(BF16)
        y = dequantize(*b, catalog.FP8_SCALE_BLOCK).astype(BF16)
        return jax.lax.dot_general(x, y, NT, preferred_element_type=BF16)

    one = jnp.float32(1.0)
    out = {"jax_dequant": jax_dequant,
           "hopper": lambda a, b: hopper_fp8_matmul(a[0], b[0], a[1], b[1]),
           "hopper_tensor": lambda a, b: hopper_fp8_matmul(a[0], b[0], one, one)}
    for name, config in configs.items():
        out[name] = lambda a, b, c=config: hopper_fp8_matmul(a[0], b[0], a[1], b[1], config=c)
    return out


def tensor_variants(configs):

    def xla_fp8_dot(a, b):
        return (jax.lax.dot_general(a[0], b[0], NT, preferred_element_type=BF16) *
                (a[1] * b[1])).astype(BF16)

    def xla_fp8_dequant(a, b):
        return jax.lax.dot_general(a[0].astype(BF16) * a[1].astype(BF16), b[0].astype(BF16) *
                                   b[1].astype(BF16), NT, preferred_element_type=BF16)

    out = {"xla_fp8_dot": xla_fp8_dot, "xla_fp8_dequant": xla_fp8_dequant,
           "hopper": lambda a, b: hopper_fp8_matmul(a[0], b[0], a[1], b[1])}
    for name, config in configs.items():
        out[name] = lambda a, b, c=config: hopper_fp8_matmul(a[0], b[0], a[1], b[1], config=c)
    return out


def kn_variants(configs):
    del configs  # the sweep is the K-major benchmark's

    def xla_fp8_kn(a, b):
        return (jax.lax.dot_general(a[0], b[1], NN, preferred_element_type=BF16) *
                (a[1] * b[2])).astype(BF16)

    def xla_fp8_kn_quant(a, b):
        b8, sb = _quantize(b[0].astype(jnp.float32))
        return (jax.lax.dot_general(a[0], b8, NN, preferred_element_type=BF16) *
                (a[1] * sb)).astype(BF16)

    def hopper(a, b):
        bq = jax_hopper.quantize_fp8(b[0], transpose=True)
        return hopper_fp8_matmul(a[0], bq.q_t, a[1], bq.scale_t)

    def hopper_fp8_kn(a, b):  # the fp8 (K, N) copy, transposed by transpose_fp8 in the call
        return hopper_fp8_matmul(a[0], b[1], a[1], b[2], transpose_b=False)

    return {"xla_fp8_kn": xla_fp8_kn, "xla_fp8_kn_quant": xla_fp8_kn_quant, "hopper": hopper,
            "hopper_fp8_kn": hopper_fp8_kn}


# The peers each mode is compared with (the best of them), and variants timed for speed only.
PEERS = {"tensor": ("xla_fp8_dot", "xla_fp8_dequant"), "block": ("jax_dequant",),
         "kn": ("xla_fp8_kn", "xla_fp8_kn_quant")}
UNCHECKED = ("hopper_tensor",)


def sweep_configs(scaling):
    fam = catalog.FAMILIES["fp8_block" if scaling == "block" else "fp8"]
    return {f"cfg {t.tag} c{cm}x{cn}": GemmConfig.for_tile(t, cluster_m=cm, cluster_n=cn)
            for t in fam.tiles for cm, cn in fam.clusters}


def bench_shape(key, m, n, k, reps, configs, scaling, device_time=False):
    n_calls, _ = timing.call_plan(m, n, k)
    n_sets = min(n_calls, timing.n_sets_for(m * k + n * k))
    sets = fp8_sets(key, m, n, k, n_sets, scaling)
    ref = jax.jit(reference, static_argnums=2)(*sets[0], scaling)
    pairs = timing.rotation(sets, n_calls)
    fns = {"block": block_variants, "tensor": tensor_variants, "kn": kn_variants}[scaling](configs)
    runs = {name: (timing.chained(f), pairs) for name, f in fns.items()}
    timed = timing.time_interleaved(runs, reps)
    # Every variant that ran, on the device too: one trace, the variants in shuffled rounds.
    ran = {name: runs[name] for name, r in timed.items() if not isinstance(r, Exception)}
    device_s = (timing.device_times(ran, reps) if device_time and ran else None) or {}
    rows = {}
    for name, r in timed.items():
        if isinstance(r, Exception):
            rows[name] = dict(error=f"{type(r).__name__}: {str(r)[:200]}")
            continue
        rows[name] = dict(us=r["median_s"] * 1e6, tflops=timing.tflops(m, n, k, r["median_s"]),
                          floor_pct=100 * floor_s(m, n, k) / r["median_s"])
        if name in device_s:
            rows[name]["device_us"] = device_s[name] * 1e6
        if name not in UNCHECKED:
            err = float(timing.rel_fro_error(r["out"], ref))
            rows[name].update(rel_err=err, wrong=not err <= ERR_LIMIT)
    ok = {n: r for n, r in rows.items() if "us" in r and not r.get("wrong")}
    best_cfg = min((n for n in ok if n.startswith("cfg ")), key=lambda n: ok[n]["us"],
                   default=None)
    peer = min((n for n in PEERS[scaling] if n in ok), key=lambda n: ok[n]["us"], default=None)
    peer_device = min((n for n in PEERS[scaling] if "device_us" in ok.get(n, {})),
                      key=lambda n: ok[n]["device_us"], default=None)
    return dict(shape=[m, n, k], floor_us=floor_s(m, n, k) * 1e6, variants=rows,
                best_config=best_cfg, peer_best=peer, peer_best_device=peer_device)


def hopper_over_peer(r, clock="us"):
    """The default config's speed over the best peer's in a bench_shape row, by the chained
    time (clock "us") or the device time ("device_us"); None where either failed, is wrong or
    has no such time."""
    v = r["variants"]
    peer = r["peer_best"] if clock == "us" else r.get("peer_best_device")
    hopper = v.get("hopper", {})
    if peer is None or clock not in hopper or hopper.get("wrong"):
        return None
    return v[peer][clock] / hopper[clock]


def hopper_over_peer_device(r):
    return hopper_over_peer(r, "device_us")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--shapes", nargs="*", type=timing.parse_shape, default=list(SHAPES))
    parser.add_argument("--random", type=int, default=0, metavar="COUNT",
                        help="about COUNT shapes drawn with --random-seed (timing.random_shapes) "
                             "instead of --shapes, summarised by M class")
    parser.add_argument("--random-seed", type=int, default=27)
    parser.add_argument("--sweep", action="store_true", help="time every compiled fp8 config")
    parser.add_argument("--configs", type=json.loads, default=[],
                        help='JSON list of GemmConfig field dicts timed beside the default, e.g. '
                             '\'[{"block_n": 64, "block_k": 128, "stages": 8, "swap_ab": true}]\'')
    parser.add_argument("--scaling", choices=("tensor", "block"), default="tensor")
    parser.add_argument("--device-time", action="store_true",
                        help="also each variant's device time per call, from one profiler trace "
                             "(timing.device_times), and the default over the best peer by it")
    parser.add_argument("--b-layout", choices=("nk", "kn"), default="nk",
                        help="kn: b stored (K, N) in bf16, per-tensor scaling (module docstring)")
    args = parser.parse_args()
    if args.b_layout == "kn":
        if args.scaling != "tensor" or args.sweep or args.configs:
            parser.error("--b-layout kn times per-tensor scaling, without --sweep or --configs")
        args.scaling = "kn"
    if args.random:
        args.shapes = timing.random_shapes(args.random, args.random_seed)
    timing.require_kernels(jax_hopper)
    configs = sweep_configs(args.scaling) if args.sweep else {}
    configs.update({"cfg " + ",".join(f"{k}={v}" for k, v in c.items()): GemmConfig(**c)
                    for c in args.configs})
    results = []
    key = jax.random.key(0)
    block = args.scaling == "block"
    peer = "dequant" if block else "xla fp8"
    hdr = (f"{'M x N x K':>20s} {'floor us':>9s} {'hopper':>8s} {'best cfg':>9s} {peer:>8s} "
           f"{'hop/peer':>9s} {'hop %floor':>10s}" + ("  hop/tensor" if block else "") +
           ("  fp8 kn" if args.scaling == "kn" else "") +
           ("  dev h/p" if args.device_time else "") + "  (TFLOP/s)")
    print(hdr, flush=True)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat(), argv=sys.argv[1:])
    os.makedirs(args.out_dir, exist_ok=True)
    prefix = {"block": "block_", "kn": "kn_"}.get(args.scaling, "")
    path = os.path.join(args.out_dir, f"fp8_{prefix}{args.tag}.json")
    wrong = []
    for i, (m, n, k) in enumerate(args.shapes):
        r = bench_shape(jax.random.fold_in(key, i), m, n, k, args.reps, configs, args.scaling,
                        args.device_time)
        results.append(r)
        v = r["variants"]
        wrong += wrong_variants(r)
        timing.write_run_json(path, complete=False, environment=env, results=results)

        def tf(name):
            return v[name]["tflops"] if name and "tflops" in v.get(name, {}) else float("nan")

        hop, other = tf("hopper"), tf(r["peer_best"])
        print(f"{f'{m}x{n}x{k}':>20s} {r['floor_us']:9.1f} {hop:8.0f} {tf(r['best_config']):9.0f} "
              f"{other:8.0f} {hop / other:8.2f}x "
              f"{v['hopper'].get('floor_pct', float('nan')):9.0f}%" +
              (f"  {hop / tf('hopper_tensor'):9.2f}x" if block else "") +
              (f"  {tf('hopper_fp8_kn') / tf('xla_fp8_kn'):5.2f}x" if args.scaling == "kn"
               else "") +
              (f"  {hopper_over_peer_device(r) or float('nan'):6.2f}x" if args.device_time
               else ""), flush=True)
    summaries = {}
    if args.random:
        summaries["m_class_summary"] = timing.class_summary(results, hopper_over_peer)
        if args.device_time:
            summaries["m_class_summary_device"] = timing.class_summary(results,
                                                                       hopper_over_peer_device)
    for key_, label in (("m_class_summary", ""), ("m_class_summary_device", " (device time)")):
        for name, c in summaries.get(key_, {}).items():
            print(f"hopper / {peer}{label}, {name}: geomean {c['geomean']:.3f} over "
                  f"{c['n_shapes']} shapes, {c['min']:.2f}-{c['max']:.2f}", flush=True)
    timing.write_run_json(path, complete=True, environment=env, results=results, **summaries)
    print(f"wrote {path}" + (f"; {len(wrong)} wrong results (WRONG RESULT above)" if wrong else ""))
    return 1 if wrong else 0


def wrong_variants(r) -> list:
    """(shape, variant) of a bench_shape row's checked variants whose result is wrong, each
    printed as it is found (a run cut short still shows it)."""
    found = [(r["shape"], n) for n, v in r["variants"].items() if v.get("wrong")]
    for shape, name in found:
        print(f"WRONG RESULT: {name} at {shape}", flush=True)
    return found


if __name__ == "__main__":
    sys.exit(main())
