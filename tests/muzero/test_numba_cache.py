"""lzk_common.numba_cache: a cold cache is compiled in a subprocess, and said in the log (the
progress line no longer claims it); a warm one is loaded silently, without a subprocess."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lzk_common import numba_cache


def _kernel(source: Path, cache: Path) -> SimpleNamespace:
    """A stand-in for an ``@njit(cache=True)`` dispatcher defined in ``source``, not yet loaded."""
    def kern() -> None:
        pass

    kern.__code__ = kern.__code__.replace(co_filename=str(source))
    return SimpleNamespace(py_func=kern, stats=SimpleNamespace(cache_path=str(cache)), signatures=[])


def _ensure(kernel: SimpleNamespace, warm: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(numba_cache, "_WARMED", set())
    monkeypatch.setattr(numba_cache, "_said", False)
    monkeypatch.setattr(numba_cache.subprocess, "run", lambda *a, **kw: calls.append(a))
    numba_cache.ensure_cached([kernel], warm)
    return calls


def test_compiling_is_logged_only_when_the_cache_is_cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    source, cache = tmp_path / "kernels.py", tmp_path / "cache"
    source.write_text("# kernels\n")
    cache.mkdir()
    kernel = _kernel(source, cache)
    caplog.set_level(logging.INFO, logger="lzkernel")

    assert len(_ensure(kernel, "cold_test_module:warm", monkeypatch)) == 1  # no index file: compiled
    assert [r.getMessage() for r in caplog.records] == [numba_cache.COMPILING]

    caplog.clear()
    index = cache / f"kernels.{kernel.py_func.__qualname__}-1.py311.nbi"
    index.write_text("")
    os.utime(index, (source.stat().st_mtime + 1,) * 2)  # newer than its source: warm
    assert _ensure(kernel, "warm_test_module:warm", monkeypatch) == [] and caplog.records == []


_COMPILE_TWICE = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
sys.path.insert(0, sys.argv[1])
from lzk_common.numba_cache import announce_compiles
announce_compiles(); announce_compiles()  # idempotent: one listener
import kernels_under_test as k
print("sums", k.first(3), k.second(4))
"""


def test_a_compile_in_the_run_process_is_announced_once_and_a_cache_load_not(tmp_path: Path) -> None:
    """announce_compiles logs the first numba compilation of the process (two kernels compiled:
    one line); a later process that loads both from the cache logs nothing."""
    import subprocess
    import sys

    (tmp_path / "kernels_under_test.py").write_text(
        "from numba import njit\n"
        "@njit(cache=True)\ndef first(n):\n    return n + 1\n"
        "@njit(cache=True)\ndef second(n):\n    return n * 2\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> list[str]:
        out = subprocess.run([sys.executable, "-c", _COMPILE_TWICE, str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return out.splitlines()

    cold = run()
    assert cold[-1] == "sums 4 8"
    assert [line for line in cold if line.startswith("compiling numba kernels")] == [
        "compiling numba kernels (the first run after an install or a source change, 10-20 s; "
        "later runs load them from the cache)"]
    assert run() == ["sums 4 8"]  # warm: loaded, not compiled, nothing said


def test_the_run_start_hook_of_lzk_common_installs_the_announcer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 registers one listener with numba at run start; other ranks stay quiet."""
    from numba.core import event

    from lzk_common import plugin

    monkeypatch.setattr(numba_cache, "_ANNOUNCER", None)
    plugin.lzkernel_run_start(SimpleNamespace(is_main=False))
    assert numba_cache._ANNOUNCER is None
    plugin.lzkernel_run_start(SimpleNamespace(is_main=True))
    listener = numba_cache._ANNOUNCER
    try:
        assert listener is not None and listener in event._registered["numba:compile"]
    finally:
        event.unregister("numba:compile", listener)
