"""The ``gloo``/``nccl`` backends in this process (world size 1) and their start-up errors.
Multi-process checks live in ``tests/distributed``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from lzkernel import CommBackend, ConfigError
from lzk_comm.plugin import TorchDistConfig, make_gloo, make_nccl
from lzk_comm.torch_dist import TorchDistComm, nccl_unavailable_reason

REPO = Path(__file__).resolve().parents[2]
needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")


@pytest.fixture
def gloo1():
    comm = TorchDistComm("gloo", timeout_s=10, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield comm
    finally:
        comm.close()
        assert not dist.is_initialized()  # the process group is destroyed


@needs_gloo
def test_world_of_one(gloo1: TorchDistComm) -> None:
    comm = gloo1
    assert isinstance(comm, CommBackend)
    assert (comm.rank, comm.world_size, comm.is_main, comm.device) == (0, 1, True, torch.device("cpu"))
    comm.barrier()
    t = torch.tensor([1.5, 2.5])
    assert comm.all_reduce_sum(t) is t and t.tolist() == [1.5, 2.5]
    nc = torch.arange(6.0).reshape(2, 3).t()  # not contiguous: goes through a copy and back
    assert comm.broadcast(nc) is nc and nc.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert comm.broadcast_object([True, {"k": 1.5}]) == [True, {"k": 1.5}]
    long = {"text": "z" * 5000}
    assert comm.broadcast_object(long) == long
    assert [g.tolist() for g in comm.gather(torch.tensor([7]))] == [[7]]
    assert comm.gather_object("me") == ["me"]
    p = torch.nn.Parameter(torch.ones(2))
    (3 * p).sum().backward()
    comm.average_gradients([p])
    assert p.grad.tolist() == [3.0, 3.0]
    assert comm.calls == 8 and comm.seconds > 0
    with pytest.raises(TypeError):
        comm.broadcast_object(torch.ones(1))
    with pytest.raises(ValueError):
        comm.broadcast(torch.ones(1), src=1)
    comm.close()
    comm.close()  # idempotent


def test_gloo_outside_torchrun_says_how_to_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=r"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are not set.*lzkernel "
                                          r"launch --nproc N CONFIG comm.name=gloo"):
        make_gloo(TorchDistConfig(timeout_s=5), None)
    assert not dist.is_initialized()


@pytest.mark.skipif(nccl_unavailable_reason() is None, reason="NCCL is usable here (see tests/distributed)")
def test_nccl_unavailable_is_a_clear_error_suggesting_gloo() -> None:
    with pytest.raises(ConfigError, match=r"comm.name=nccl: NCCL is unavailable \(.+\); use comm.name=gloo"):
        make_nccl(TorchDistConfig(), None)
    assert not dist.is_initialized()


@pytest.mark.skipif(nccl_unavailable_reason() is None, reason="NCCL is usable here (see tests/distributed)")
def test_cli_nccl_unavailable_exits_2_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lzkernel", "run", str(REPO / "configs" / "cartpole_rezero.yaml"),
         f"run.out_dir={tmp_path / 'run'}", "comm.name=nccl", "run.threads=1"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "use comm.name=gloo" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing was written before the failure


def test_config_validation() -> None:
    from lzk_comm.plugin import ThreadsConfig  # noqa: F401  (schemas import without torch)

    assert TorchDistConfig().timeout_s == 120.0
    with pytest.raises(ValueError, match="backend"):
        TorchDistComm("mpi")
