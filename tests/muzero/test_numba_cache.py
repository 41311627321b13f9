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
    assert [r.getMessage() for r in caplog.records] == [
        "compiling search kernels into numba's cache (once per install or upgrade, ~15 s)"]

    caplog.clear()
    index = cache / f"kernels.{kernel.py_func.__qualname__}-1.py311.nbi"
    index.write_text("")
    os.utime(index, (source.stat().st_mtime + 1,) * 2)  # newer than its source: warm
    assert _ensure(kernel, "warm_test_module:warm", monkeypatch) == [] and caplog.records == []
