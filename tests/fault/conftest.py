"""Fixtures shared by the fault tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fault_helpers import loop_config, lzk


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config, run dir) of a fault_loop run of 10 iterations: checkpoints at 5 and 10, each with
    arrays.npz. Copy it before changing it: a module's tests share it."""
    tmp = tmp_path_factory.mktemp("finished")
    cfg = loop_config(tmp / "c.yaml", tmp / "out")
    proc = lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp / "out" / "ckpt" / "step_000000000010" / "arrays.npz").is_file()
    return cfg, tmp / "out"


@pytest.fixture
def finished_copy(finished_run: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, run dir, its last checkpoint step) of a private copy of ``finished_run``, to damage."""
    cfg, src = finished_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    return cfg, out, out / "ckpt" / "step_000000000010"
