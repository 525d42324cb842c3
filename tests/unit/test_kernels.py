"""The package's numba kernels where numba can write no cache folder (a read-only image run by a user without a
home): they compile in each process, and one warning names the fix, rather than the package failing to import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.checks import immutable, make_read_only
from tests.support.paths import REPO

MODULE = '''
from dagster_databus.core.kernels import kernel


@kernel
def add(a, b):
    return a + b


@kernel(nogil=False)
def twice(a):
    return add(a, a)
'''

PROBE = '''
import warnings
import numba

try:  # what the package's kernels met before: numba refuses cache=True where it can write no folder
    numba.njit(cache=True)(lambda a: a)
    print("numba found a cache folder")
except RuntimeError as exc:
    print("numba refused:", "no locator available" in str(exc))
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    import kernels_here
    print("results:", kernels_here.add(2, 3), kernels_here.twice(4))
print("warnings:", len(said))
for w in said:
    print(w.category.__name__, str(w.message))
'''



def test_kernels_compile_where_no_cache_folder_can_be_written_and_one_warning_names_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "readonly"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "kernels_here.py").write_text(MODULE)
    (folder / "probe.py").write_text(PROBE)
    make_read_only(folder / "__pycache__")
    try:
        assert immutable(folder, True)
        env = {**os.environ, "NUMBA_CACHE_DIR": "/dev/null/numba", "HOME": "/dev/null", "XDG_CACHE_HOME": "/dev/null",
               "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)]), "PYTHONDONTWRITEBYTECODE": "1"}
        run = subprocess.run([sys.executable, str(folder / "probe.py")], env=env, capture_output=True, text=True,
                             timeout=300)
    finally:
        immutable(folder, False)
        immutable(folder / "__pycache__", False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.splitlines()
    assert out[0] == "numba refused: True", run.stdout  # the setting is real: no folder is writable
    assert out[1] == "results: 5 8" and out[2] == "warnings: 1", run.stdout
    assert out[3].startswith("RuntimeWarning numba cannot cache dagster-databus's compiled kernels (kernels_here.add")
    assert "NUMBA_CACHE_DIR=/dev/null/numba" in out[3] and "Fix: set NUMBA_CACHE_DIR to a folder" in out[3]
    assert not list((folder / "__pycache__").iterdir())


COLD = '''
import hashlib, zlib
import numpy as np
import pyarrow as pa
from dagster_databus.core import crc32, fingerprint, kernels

texts = pa.array([f"key {i}".encode() * (i % 9) for i in range(5_000)], pa.binary())
print("cold:", kernels.few(5_000, 2_000), kernels.few(kernels.COLD_ITEMS, 2_000), kernels.few(10, 0))
hashed = fingerprint.digests(texts)  # 5,000 texts in a cold process: hashlib's
assert not any(k.signatures for k in kernels._KERNELS), "a kernel ran for 5,000 texts in a cold process"
assert hashed.tolist() == [int(hashlib.md5(t.as_py()).hexdigest()[:16], 16) for t in texts]
assert crc32.crc32_each(texts).tolist() == [zlib.crc32(t.as_py()) for t in texts]
data, offsets = fingerprint._buffers(texts)
out = np.empty(len(texts), np.uint64)
fingerprint._md5_prefixes(data, offsets, out)  # the kernel: numba is set up now
assert out.tolist() == hashed.tolist()
print("warm:", kernels.few(5_000, 2_000), kernels.few(1_999, 2_000))
assert fingerprint.digests(texts).tolist() == hashed.tolist()  # the kernel's, from here on
'''


def test_a_process_whose_kernels_have_not_run_takes_the_fallbacks_for_a_few_thousand_items() -> None:
    """numba's set-up costs a process's first kernel a fifth of a second: until one has run, 5,000 texts are hashed
    and summed by hashlib and zlib (the same digests as the kernel's), and ``few`` says so; after, the kernels'
    own crossovers hold. A path whose crossover is 0 always runs its kernel."""
    done = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["cold: True False False", "warm: False True"], done.stdout


def test_the_fallbacks_cold_budget_is_spent_once_per_process() -> None:
    """A long process that only ever sees calls of a few thousand items (a capture's chunks) takes the fallbacks for
    ``COLD_BUDGET`` items in all, then the kernels from there on: numba's set-up is paid once, not avoided forever."""
    code = ("from dagster_databus.core import kernels\n"
            "calls = [kernels.few(9_000, 2_000) for _ in range(8)]\n"
            "print(calls.index(False), kernels.COLD_BUDGET // 9_000, calls[calls.index(False):].count(True))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    first_kernel, budgeted, after = map(int, done.stdout.split())
    assert first_kernel == budgeted == 5 and after == 0, done.stdout
