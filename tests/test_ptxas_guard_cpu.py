"""cmake/ptxas_guard.py, the launcher every kernel compile runs through: a compile whose ptxas
reports wgmma instructions serialised (printed as info, which --warning-as-error lets through)
fails; anything else keeps the compiler's own output and exit status. A stand-in compiler (this
Python printing what ptxas would) takes nvcc's place."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUARD = os.path.join(ROOT, "cmake", "ptxas_guard.py")
SERIALISED = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions "
              "are serialized due to non wgmma instructions defining accumulator registers")


def _compile(output: str, status: int = 0, stream: str = "stdout"):
    code = f"import sys; print({output!r}, file=sys.{stream}); sys.exit({status})"
    return subprocess.run([sys.executable, GUARD, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)


def test_serialised_wgmma_fails_the_compile():
    for stream in ("stdout", "stderr"):
        proc = _compile(SERIALISED, stream=stream)
        assert proc.returncode == 1
        assert "C7515" in proc.stdout + proc.stderr  # ptxas's own line is kept
        assert "serialised wgmma" in proc.stderr


def test_other_output_and_status_pass_through():
    clean = "ptxas info    : Used 168 registers, used 16 barriers"
    proc = _compile(clean)
    assert proc.returncode == 0 and clean in proc.stdout and "error" not in proc.stderr
    failed = _compile("error: identifier undefined", status=2, stream="stderr")
    assert failed.returncode == 2 and "identifier undefined" in failed.stderr
    # another C75xx info that is not about wgmma stays info
    other = _compile("ptxas info    : (C7599) some other advice")
    assert other.returncode == 0
