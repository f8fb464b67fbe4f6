"""Building the package: without a CUDA toolkit it is a pure-JAX package that says so; an
explicitly set compiler variable that points at nothing is an error naming the variable.

Each case builds a wheel (`pip wheel --no-build-isolation`) in a build directory of its own, so
the tree's build/ is left alone. Only CMake's configure step runs: no kernel is compiled.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HAVE_BUILD_TOOLS = (importlib.util.find_spec("scikit_build_core") is not None and
                     importlib.util.find_spec("nanobind") is not None and
                     (shutil.which("cmake") or importlib.util.find_spec("cmake")))
pytestmark = pytest.mark.skipif(
    not _HAVE_BUILD_TOOLS, reason="needs the build requirements (scikit-build-core, nanobind, "
                                  "cmake) to build a wheel; scripts/test.sh installs them")
_COMPILER_VARS = ("CUDACXX", "CUDA_HOME", "CUDA_PATH", "JAX_HOPPER_KERNELS")


def _build_wheel(tmp_path, **env_vars):
    env = {k: v for k, v in os.environ.items() if k not in _COMPILER_VARS}
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v",
         "-w", str(tmp_path / "dist"), "-C", f"build-dir={tmp_path / 'build'}", ROOT],
        env=env, capture_output=True, text=True, timeout=600)


def test_without_kernels_the_wheel_is_pure_jax_and_says_why(tmp_path):
    proc = _build_wheel(tmp_path, JAX_HOPPER_KERNELS="OFF")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "building WITHOUT the Hopper kernels" in proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").iterdir()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = z.read("jax_hopper/_build_info.py").decode()
    assert not [n for n in names if "_jax_hopper" in n], "an extension in a pure-JAX wheel"
    assert "jax_hopper/gemm/api.py" in names
    assert "KERNELS = False" in info and "JAX_HOPPER_KERNELS=OFF" in info


@pytest.mark.parametrize("var", ["CUDACXX", "CUDA_HOME", "CUDA_PATH"])
def test_a_compiler_variable_pointing_at_nothing_is_an_error_naming_it(tmp_path, var):
    missing = str(tmp_path / "no-such-cuda")
    proc = _build_wheel(tmp_path, **{var: missing})
    assert proc.returncode != 0
    assert f"{var}={missing}" in proc.stdout + proc.stderr, proc.stderr[-3000:]


def test_an_unknown_kernels_mode_is_an_error(tmp_path):
    proc = _build_wheel(tmp_path, JAX_HOPPER_KERNELS="maybe")
    assert proc.returncode != 0
    assert "JAX_HOPPER_KERNELS=MAYBE must be AUTO, ON or OFF" in proc.stdout + proc.stderr
