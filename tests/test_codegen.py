"""The compiled step's machine code for an AMD Zen 3 (the kind of AVX2 machine CI and many readers have): compiled here
for that target in a fresh process, then read."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from lengthgen.engine import step

# the code a Zen 3 gets (no AVX-512), whatever this machine is: numba compiles for the CPU named, with these features
ZEN3 = {"NUMBA_CPU_NAME": "znver3",
        "NUMBA_CPU_FEATURES": "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+popcnt,+movbe,+sse4.2,-avx512f"}

# compiles the blocks (both paths: step.FUNCTIONS) and log1p for float32 and float64, loading nothing from numba's
# cache and saving nothing to it (a cached function's machine code cannot be read back); prints the masked stores
# found in each
SCAN = r"""
import re
import numba
import numba.core.caching as caching
caching.FunctionCache.load_overload = lambda self, *a, **k: None
caching.FunctionCache.save_overload = lambda self, *a, **k: None
import numpy as np
from lengthgen.engine import numerics, step
store = re.compile(r"v(p)?maskmov[a-z]*\s+%[xy]mm\d+, %[xy]mm\d+, ")
for dtype in ("float32", "float64"):
    dt = np.dtype(dtype)
    bits = numerics.int_scratch(np.zeros(1, dt), 1)
    sigs = {name: step.block_types(dtype)[name] for name in step.FUNCTIONS}
    sigs["log1p"] = tuple(numba.typeof(a) for a in (np.zeros(1, dt),) * 3 + (bits,))
    for name, sig in sigs.items():
        f = numerics.log1p if name == "log1p" else getattr(step, name)
        f.compile(sig)
        print(dtype, name, len(store.findall(f.inspect_asm(sig))))
"""


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 machine code")
def test_no_masked_stores_in_the_step_for_zen3(tmp_path: Path) -> None:
    """No AVX masked store (vmaskmovps / vpmaskmovd and their kin) in the step's blocks or log1p as compiled for an
    AMD Zen 3. LLVM 22 turns a select stored back where one of its sides was loaded (``x[i] = y if c else x[i]``)
    into one; Zen 1-3 run it as microcode (42 uops, one per 12 cycles, by uops.info). At 74bf5d3 four loops held
    one each: the attention's column maxima (two), the loss's argmax and log1p (also inlined in the loss); now each
    writes its select elsewhere (``step._attention``, ``step._loss``, ``numerics.log1p``)."""
    env = {**os.environ, **ZEN3, "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("LENGTHGEN_BENCH_AS_AVX2", None)
    done = subprocess.run([sys.executable, "-c", SCAN], env=env, capture_output=True, text=True,
                          timeout=900, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    counts = {tuple(line.split()[:2]): int(line.split()[2]) for line in done.stdout.splitlines()}
    assert len(counts) == 2 * (len(step.FUNCTIONS) + 1), done.stdout
    assert not any(counts.values()), {k: n for k, n in counts.items() if n}
