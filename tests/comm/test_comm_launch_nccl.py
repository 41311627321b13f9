"""``lzkernel launch ... comm.name=nccl`` where NCCL cannot run: one line, exit 2, before any
rank starts (it used to be one identical error per rank plus the launcher's line, and with
fewer GPUs than ranks the ranks that had one waited in the rendezvous until the fail-fast
grace killed them)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fault"))
from fault_helpers import assert_one_line_error, loop_config, lzk  # noqa: E402

from lzkernel.errors import ConfigError  # noqa: E402
from lzkernel.launch import _check_config  # noqa: E402


CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "cartpole_rezero.yaml")


def _enough_gpus(n: int) -> bool:
    return torch.distributed.is_nccl_available() and torch.cuda.is_available() and torch.cuda.device_count() >= n


@pytest.mark.skipif(_enough_gpus(2), reason="this machine can run 2 NCCL ranks")
def test_launch_with_nccl_and_no_gpu_per_rank_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out", comm={"name": "nccl"})
    proc = lzk(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin"], tmp_path)
    assert_one_line_error(proc, "comm.name=nccl: NCCL is unavailable", "use comm.name=gloo")
    assert "[rank" not in proc.stderr + proc.stdout  # no rank was started
    assert not (tmp_path / "out").exists()


def test_fewer_gpus_than_ranks_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    _check_config(1, [CONFIG, "comm.name=nccl"])
    with pytest.raises(ConfigError, match=r"LOCAL_RANK 1 has no GPU of its own \(1 visible\); NCCL needs one GPU per rank"):
        _check_config(2, [CONFIG, "comm.name=nccl"])
