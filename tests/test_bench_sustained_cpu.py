"""CPU tests of the sustained-load benchmark's bookkeeping: the sample window's summary, the
sampler without NVML, and the timed run on a plain jnp product."""

import os
import sys
import time

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import bench_sustained  # noqa: E402
import timing  # noqa: E402


def test_window_summary_takes_only_the_window():
    samples = [(0.5, 1980, 100.0, 0x1, 40),            # before the window: idle, boost clock
               (1.0, 1500, 690.0, 0x4, 60), (1.5, 1400, 700.0, 0x4, 62),
               (2.0, 1450, 695.0, 0x4 | 0x8, 61),
               (3.0, 1980, 90.0, 0x1, 50)]              # after it
    got = bench_sustained.window_summary(samples, 1.0, 2.0)
    assert got["sm_mhz"] == 1450 and got["watts"] == 695.0
    assert got["max_temp_c"] == 62 and got["n_samples"] == 3
    assert got["reasons"] == ["sw_power_cap", "hw_slowdown"]


def test_window_summary_of_no_samples_is_none():
    assert bench_sustained.window_summary([(5.0, 1500, 600.0, 0, 50)], 1.0, 2.0) is None


def test_sampler_without_nvml_reports_unavailable_and_takes_no_samples():
    with bench_sustained.NvmlSampler(library="libdoes-not-exist.so") as sampler:
        assert not sampler.available
    assert sampler.samples == []


@pytest.mark.parametrize("env,want", [({}, 0), ({"CUDA_VISIBLE_DEVICES": "3,1"}, 3),
                                      ({"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd34"}, b"GPU-ab12"),
                                      ({"CUDA_VISIBLE_DEVICES": ""}, 0)])
def test_visible_gpu_follows_cuda_visible_devices(env, want):
    assert bench_sustained.visible_gpu(env) == want


def test_sustained_run_times_the_second_half():
    sets = timing.rotating_sets(jax.random.key(0), 32, 16, 8, 2)
    pairs = timing.rotation(sets, 3)
    run = timing.chained(lambda a, b: jnp.dot(a, b))
    jax.block_until_ready(run(pairs))
    start = time.time()
    per_call, t0, t1 = bench_sustained.sustained_run(run, pairs, 0.2)
    total = time.time() - start
    assert 0 < per_call < 0.2
    assert t0 - start >= 0.1 and 0 < t1 - t0 <= total - 0.1  # the second half only


def test_variants_name_each_forced_config():
    products, skipped = bench_sustained.variants([{"block_m": 128, "block_n": 256, "stages": 4}])
    assert list(products) == ["xla", "hopper", "hopper:block_m=128,block_n=256,stages=4"]
    assert skipped == {}


def test_variants_reject_an_unknown_config_field():
    products, skipped = bench_sustained.variants([{"block_q": 128}])
    assert "hopper:block_q=128" not in products
    assert "block_q" in skipped["hopper:block_q=128"]
