"""NCCL where a GPU is present: world size 1 on one GPU (NCCL wants one GPU per rank).
Skipped with the reason otherwise (this CPU-only CI machine, a CPU build of torch)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dist_helpers import CARTPOLE_REZERO, TINY, TORCHRUN, clean_env, leftover_processes, torchrun
from lzk_comm.torch_dist import nccl_unavailable_reason

REASON = nccl_unavailable_reason()
pytestmark = [pytest.mark.distributed, pytest.mark.skipif(REASON is not None, reason=f"NCCL unavailable: {REASON}")]


def test_nccl_world_of_one_collectives() -> None:
    import torch.distributed as dist

    from lzk_comm.torch_dist import TorchDistComm

    comm = TorchDistComm("nccl", timeout_s=60, store=dist.HashStore(), rank=0, world_size=1, env={"LOCAL_RANK": "0"})
    try:
        assert comm.device == torch.device("cuda", 0)
        comm.barrier()
        cpu = torch.tensor([1.0, 2.0])
        assert comm.all_reduce_sum(cpu) is cpu and cpu.device.type == "cpu" and cpu.tolist() == [1.0, 2.0]
        gpu = torch.ones(3, device="cuda")
        assert comm.broadcast(gpu) is gpu and gpu.sum().item() == 3.0
        assert comm.broadcast_object({"stop": True, "s": "x" * 2000}) == {"stop": True, "s": "x" * 2000}
        p = torch.nn.Parameter(torch.ones(2, device="cuda"))
        (2 * p).sum().backward()
        comm.average_gradients([p])
        assert p.grad.tolist() == [2.0, 2.0]
    finally:
        comm.close()
    assert not dist.is_initialized()


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this interpreter")
def test_torchrun_nccl_training_smoke(tmp_path: Path) -> None:
    out = tmp_path / "run"
    launch = torchrun(["run", str(CARTPOLE_REZERO), f"run.out_dir={out}", "comm.name=nccl", "comm.timeout_s=120",
                       "run.device=cuda", *TINY], 1, env=clean_env(), timeout=300)
    assert launch.returncode == 0, launch.output[-5000:]
    versions = json.loads((out / "versions.json").read_text())
    assert versions["world_size"] == 1 and versions["device"].startswith("cuda")
    assert not leftover_processes(launch.pids, marker=str(out))
