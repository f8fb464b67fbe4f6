"""CPU checks of scripts/device_ab.sh, the one-call A/B of a kernel change on a Hopper machine
(its builds and timings need the GPU): the script parses, and without a baseline it says how
to call it and fails before building anything."""

import os
import subprocess

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "device_ab.sh")


def test_the_script_parses():
    subprocess.run(["bash", "-n", SCRIPT], check=True)


def test_without_a_baseline_it_prints_its_usage_and_exits_2(tmp_path):
    run = subprocess.run(["bash", SCRIPT], capture_output=True, text=True,
                         env=dict(os.environ, OUT=str(tmp_path / "logs")))
    assert run.returncode == 2
    assert "usage: bash scripts/device_ab.sh BASE" in run.stderr
    assert not (tmp_path / "logs").exists()  # nothing built, nothing written
