"""Compiler launcher for the kernels' CUDA sources (CMakeLists.txt: CUDA_COMPILER_LAUNCHER).

Runs the compile it is given, passes its output through, and fails it where ptxas reports
wgmma instructions serialised (C75xx "Potential Performance Loss: wgmma.mma_async instructions
are serialized"): ptxas prints that as info, not as a warning, so --warning-as-error lets it
through, and such a kernel runs its MMAs one at a time (a lean mainloop did, 2026-11-28,
unnoticed until its compile was read by hand).
"""

import re
import subprocess
import sys

SERIALISED = re.compile(r"\(C75\d\d\)[^\n]*wgmma[^\n]*serializ", re.IGNORECASE)


def main(argv: list[str]) -> int:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode == 0 and SERIALISED.search(proc.stdout + proc.stderr):
        sys.stderr.write("error: ptxas serialised wgmma instructions (the C75xx line above): "
                         "the kernel would run its MMAs one at a time\n")
        return 1
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
