"""Tuned configs: the cache `python -m jax_hopper.tune` writes, consulted at trace time.

default_config() is the config of every call that passes none (hopper_matmul, hopper_glu,
hopper_fp8_matmul, the backward GEMMs): the cache's entry for this GPU and problem when there is
one, else the heuristic (jax_hopper.gemm.heuristics.heuristic_config) weighing tiles against
this GPU's SM count. Such calls choose at launch (primitive.launch, fp8.launch), on the problem
one device runs: a shard of a sharded call, the whole batch of a vmapped one. grouped_config()
is the same for the grouped products and contractions (hopper_ragged_dot, hopper_ragged_glu,
hopper_ragged_fp8_dot, their weight gradients), falling back on
heuristics.grouped_heuristic_config; their group sizes live on the device, so an entry holds
for whatever sizes a call brings (tune times uniform routing).

The cache is one JSON file: $JAX_HOPPER_TUNE_CACHE, else $XDG_CACHE_HOME/jax_hopper/tune.json
(~/.cache when XDG_CACHE_HOME is unset).

    {"format": 1,
     "gpus": {"NVIDIA H100 80GB HBM3, 132 SMs": {
        "matmul bfloat16 kn 1x8192x8192x8192": {"config": {GemmConfig fields}, "us": ...,
                                                 "heuristic_us": ..., "date": ...}}}}

A problem key is family, input dtype (fp8: "a*b" where b's differs, e.g.
"float8_e4m3fn*float8_e5m2"), operand majors (k: K-major, m/n: MN-major) and batch x M x N x K
(N in product columns: 2F for the gated unit). For the grouped families the groups G stand in
the batch's place: G x M x N x K, M all rows; for the contractions, out (G, P, Q) over M
contracted rows: G x P x Q x M. The fused epilogue is not in the key: under bias + tanh-GELU
the config that wins the plain product won on all five shapes timed (H100, 2026-12-07,
docs/benchmarks.md, "Configs under a fused epilogue"). A file that cannot be read, is
not this format, or holds an entry that is no longer a compiled config (the catalog changed) is
ignored, that file, GPU section or entry, with one warning each: a cache never makes a call
fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import numbers
import os
import tempfile
import warnings

import jax

from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.heuristics import Choice, grouped_heuristic_config, heuristic_choice
from jax_hopper.gemm.pitch import rows_off_l2_line, weight_read_shifted
from jax_hopper.kernels import catalog

FORMAT = 1


def cache_path() -> str:
    explicit = os.environ.get("JAX_HOPPER_TUNE_CACHE")
    if explicit:
        return explicit
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "jax_hopper", "tune.json")


def _sm_count(device) -> int | None:
    """A GPU's multiprocessor count (None for a device that reports none, e.g. a CPU)."""
    return getattr(device, "core_count", None) or None


def gpu_key(device=None) -> str:
    """The device the entries were timed on: its kind and (for a GPU) SM count."""
    device = device or jax.devices()[0]
    cores = _sm_count(device)
    return f"{device.device_kind}, {cores} SMs" if cores else device.device_kind


def device_sms(device=None) -> int:
    """The SM count the heuristic weighs tiles against: the device's own (an H100 PCIe has
    114, a MIG slice fewer), else catalog.DEFAULT_NUM_SMS (tracing on a CPU)."""
    return _sm_count(device or jax.devices()[0]) or catalog.DEFAULT_NUM_SMS


def problem_key(family: str, dtype: str, a_mn: bool, b_mn: bool, batch: int, m: int, n: int,
                k: int, b_dtype: str | None = None) -> str:
    majors = ("m" if a_mn else "k") + ("n" if b_mn else "k")
    dtypes = dtype if b_dtype in (None, dtype) else f"{dtype}*{b_dtype}"
    return f"{family} {dtypes} {majors} {batch}x{m}x{n}x{k}"


def parse_problem_key(key: str) -> tuple:
    """problem_key's arguments back from its string, in its order (b_dtype None where the
    operands share a dtype)."""
    family, dtypes, majors, dims = key.split(" ")
    dtype, _, b_dtype = dtypes.partition("*")
    batch, m, n, k = map(int, dims.split("x"))
    return family, dtype, majors[0] == "m", majors[1] == "n", batch, m, n, k, b_dtype or None


def _is_cache(data) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT and \
        isinstance(data.get("gpus"), dict)


def _warn(message: str) -> None:
    warnings.warn(f"jax_hopper tune cache: {message}; ignored", stacklevel=3)


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> dict:
    """path's entries for every GPU (an unreadable or foreign file: none, with a warning; a GPU
    section that is not a mapping of entries: dropped, with a warning)."""
    del mtime  # part of the cache key only: a rewritten file is read again
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        _warn(f"{path} could not be read ({e})")
        return {}
    if not _is_cache(data):
        _warn(f"{path} is not a format-{FORMAT} jax_hopper tune cache")
        return {}
    gpus = {}
    for gpu, entries in data["gpus"].items():
        if isinstance(entries, dict):
            gpus[gpu] = entries
        else:
            _warn(f"{path}: the section of {gpu!r} is not a mapping of problems")
    return gpus


@functools.lru_cache(maxsize=256)
def _warn_entry_once(path: str, mtime: float, key: str, reason: str) -> None:
    """One warning per bad entry of one version of the file, not one per trace."""
    del mtime
    _warn(f"{path}: entry {key!r} is not a compiled config ({reason})")


def lookup(family: str, dtype: str, a_mn: bool, b_mn: bool, batch: int, m: int, n: int,
           k: int, b_dtype: str | None = None) -> GemmConfig | None:
    """The tuned config for this problem on this GPU, if the cache holds a valid one (dtype is
    a's, b_dtype b's where it differs: the fp8 pairs)."""
    path = cache_path()
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None  # no cache: nothing tuned yet
    key = problem_key(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype)
    entry = _load(path, mtime).get(gpu_key(), {}).get(key)
    if entry is None:
        return None
    try:
        config = GemmConfig(**entry["config"])
        config.validate(dtype, a_mn, b_mn, family=family, b_dtype=b_dtype)
    except (KeyError, TypeError, ValueError) as e:
        _warn_entry_once(path, mtime, key, str(e))
        return None
    return config


# The lists recording() hands out, each collecting the problems default_config is asked for.
_RECORDERS: list[list[tuple]] = []


@contextlib.contextmanager
def recording():
    """Yields a list that collects (family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype) of every
    default_config call made inside: the problems launches look configs up for (tune.problems_of
    uses it to see each device's problems while XLA partitions a sharded program)."""
    seen: list[tuple] = []
    _RECORDERS.append(seen)
    try:
        yield seen
    finally:
        _RECORDERS.remove(seen)


def _record(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype) -> None:
    for seen in _RECORDERS:  # b_dtype as problem_key keys it: only where it differs
        seen.append((family, dtype, bool(a_mn), bool(b_mn), batch, m, n, k,
                     None if b_dtype in (None, dtype) else b_dtype))


def concrete(family: str, **dims) -> None:
    """ValueError unless every dimension of a problem is a known integer: a config (its tile,
    its plan) is chosen per shape at trace time, which jax.export's symbolic dimensions do not
    give."""
    symbolic = {name: d for name, d in dims.items() if not isinstance(d, numbers.Integral)}
    if symbolic:
        raise ValueError(f"jax_hopper ({family}): the problem's dimensions must be concrete "
                         f"integers, each shape gets its own kernel config; got symbolic "
                         f"{symbolic} (jax.export: export one program per shape)")


def default_config(family: str, dtype: str, a_mn: bool, b_mn: bool, batch: int, m: int, n: int,
                   k: int, b_dtype: str | None = None) -> GemmConfig:
    """The config of a call that passes none: tuned for this GPU, else the heuristic's."""
    concrete(family, batch=batch, m=m, n=n, k=k)
    _record(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype)
    tuned = lookup(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype)
    if tuned is not None:
        return tuned
    return heuristic_default(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype)


def heuristic_default(family: str, dtype: str, a_mn: bool, b_mn: bool, batch: int, m: int,
                      n: int, k: int, b_dtype: str | None = None) -> GemmConfig:
    """The heuristic's config for a call that passes none, where nothing is tuned:
    heuristic_default_choice's."""
    return heuristic_default_choice(family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype).config


def heuristic_default_choice(family: str, dtype: str, a_mn: bool, b_mn: bool, batch: int,
                             m: int, n: int, k: int, b_dtype: str | None = None) -> Choice:
    """heuristics.heuristic_choice (the config and the rule that picked it) for a call that
    passes none: for this GPU's SM count and the operands' row pitches
    (pitch.rows_off_l2_line; a weight the decode tiles read in place,
    pitch.weight_read_shifted)."""
    return heuristic_choice(family, a_mn, batch, m, n, k, num_sms=device_sms(),
                            off_line=rows_off_l2_line(dtype, a_mn, b_mn, m, n, k, b_dtype),
                            odd_weight=weight_read_shifted(family, dtype, b_mn, n, k))


def grouped_config(family: str, dtype: str, a_mn: bool, b_mn: bool, groups: int, m: int,
                   n: int, k: int, b_dtype: str | None = None) -> GemmConfig:
    """default_config for a grouped product or contraction (catalog.GROUPED_FAMILIES,
    CONTRACTION_FAMILIES; the problem as the module docstring keys it): tuned for this GPU,
    else heuristics.grouped_heuristic_config."""
    concrete(family, groups=groups, m=m, n=n, k=k)
    _record(family, dtype, a_mn, b_mn, groups, m, n, k, b_dtype)
    tuned = lookup(family, dtype, a_mn, b_mn, groups, m, n, k, b_dtype)
    if tuned is not None:
        return tuned
    return grouped_heuristic_config(family, groups, m, n, k)


def store(gpu: str, entries: dict, path: str | None = None) -> str:
    """Merges {problem key: entry} for `gpu` into the cache (replacing an unreadable one) and
    writes it atomically; returns the path.

    Then it clears JAX's trace and compile caches (jax.clear_caches): configs are chosen while
    a call is traced, and JAX reuses a trace of the same function and shapes (a function jitted
    before, or the layers of a call traced before: on jax 0.11 a GEMM traced by problems_of
    was reused, heuristic config and all, by the next jit of it on an H100). Without the
    clearing, tune(problems_of(step, ...)) followed by jax.jit(step) in one process would run
    the heuristic's configs. A cache written by another process, or another cache named by
    JAX_HOPPER_TUNE_CACHE mid-process, reaches GEMMs traced before only after
    jax.clear_caches()."""
    path = path or cache_path()
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = None
    if not _is_cache(data):
        data = {"format": FORMAT, "gpus": {}}
    if not isinstance(data["gpus"].get(gpu), dict):  # absent, or not a mapping (replaced)
        data["gpus"][gpu] = {}
    data["gpus"][gpu].update(entries)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    jax.clear_caches()
    return path


def config_fields(config: GemmConfig) -> dict:
    """A config as the JSON entry keeps it: every field, defaults included, so that an entry
    keeps its meaning if a default changes (the majors come from the call)."""
    fields = dataclasses.asdict(config)
    return {k: v for k, v in fields.items() if k not in ("a_mn_major", "b_mn_major")}
