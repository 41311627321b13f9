"""``comm.name=gloo`` with more ranks on one machine than CPU cores is a config error (exit 2,
RELIABILITY B5) unless ``comm.oversubscribe=true``: asked once by ``lzkernel launch`` before any
rank starts, and by each rank's backend under torchrun (``LOCAL_WORLD_SIZE``)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fault"))
from fault_helpers import assert_one_line_error, loop_config, lzk  # noqa: E402

from lzkernel import launch  # noqa: E402
from lzkernel.errors import ConfigError  # noqa: E402

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "cartpole_rezero.yaml")


def test_more_ranks_than_cores_is_refused_unless_oversubscribe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "available_cores", lambda: 2)
    launch.check_cores(2, oversubscribe=False)
    with pytest.raises(ConfigError, match=r"comm.name=gloo: 3 ranks on this machine but 2 CPU core\(s\).*"
                                          r"comm.oversubscribe=true"):
        launch.check_cores(3, oversubscribe=False)
    launch.check_cores(3, oversubscribe=True)
    # the launcher reads the option from the run's config
    with pytest.raises(ConfigError, match="3 ranks on this machine"):
        launch._check_config(3, [CONFIG, "comm.name=gloo"])
    launch._check_config(3, [CONFIG, "comm.name=gloo", "comm.oversubscribe=true"])


def test_the_ranks_backend_checks_torchruns_local_world(monkeypatch: pytest.MonkeyPatch) -> None:
    from lzk_comm.plugin import TorchDistConfig, make_gloo

    monkeypatch.setattr(launch, "available_cores", lambda: 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match="4 ranks on this machine but 2 CPU core"):
        make_gloo(TorchDistConfig())


def test_launch_with_more_ranks_than_cores_is_one_line_exit_2(tmp_path: Path) -> None:
    nproc = launch.available_cores() + 1
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out", comm={"name": "gloo"})
    proc = lzk(["launch", "--nproc", str(nproc), cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, f"{nproc} ranks on this machine", "comm.oversubscribe=true")
    assert "[rank" not in proc.stderr + proc.stdout and not (tmp_path / "out").exists()


def test_launch_into_a_directory_with_checkpoints_is_refused_before_any_rank(tmp_path: Path) -> None:
    """A fresh launch into a run directory that holds checkpoints: one line, exit 2, no rank
    started (each rank used to find it out itself, rank 1 with a PeerFailed line first)."""
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out", run={"max_train_iters": 2})
    assert lzk(["run", cfg, "-p", "lzk_fault_plugin"], tmp_path).returncode == 0
    proc = lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "comm.name=gloo"], tmp_path)
    assert_one_line_error(proc, "already holds checkpoints", "--resume auto")
    assert "[rank" not in proc.stderr + proc.stdout
