"""RELIABILITY D3 under ``lzkernel launch``: a rank killed from outside (``kill -9``, the OOM
killer) is the root cause the launch names, although it printed no error of its own and its
peer's ``PeerFailed`` line (Connection closed/reset by peer) is read first; the survivor exits
within seconds and nothing is left behind.

(Before: the launcher counted every rank that died of a signal without an error line as a
consequence of the teardown, so it named rank 0 and its PeerFailed, the one rank that had not
failed first.)
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fault"))
from fault_helpers import alive, fault_env, loop_config, popen, process_tree  # noqa: E402

from lzkernel.launch import _Rank, _summary  # noqa: E402

PEER = ("lzkernel: error: rank 0: PeerFailed: all_reduce_sum (collective #7) on rank 0 failed after 0.0 s: "
        "Connection closed by peer (another rank failed or left first: its error is the root cause)")


class _Proc:
    def __init__(self, returncode: int) -> None:
        self.returncode = returncode


def test_a_rank_killed_from_outside_is_the_root_cause(capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0's PeerFailed line came first (10.0) and rank 1's death was seen at the next
    monitor tick (10.2); rank 1 is still the one named."""
    ranks = [_Rank(0, _Proc(1), error_line=PEER, error_at=10.0, exited_at=10.2),  # type: ignore[arg-type]
             _Rank(1, _Proc(-signal.SIGKILL), exited_at=10.2, killed_outside=True)]  # type: ignore[arg-type]
    assert _summary(ranks, None, None, []) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 1 was killed by SIGKILL, not sent by the launcher"), last


def test_a_rank_killed_by_the_teardown_is_still_not_blamed(capsys: pytest.CaptureFixture[str]) -> None:
    own = "lzkernel: error: rank 0: RuntimeError: boom"
    ranks = [_Rank(0, _Proc(1), error_line=own, error_at=12.0, exited_at=12.1),  # type: ignore[arg-type]
             _Rank(1, _Proc(-signal.SIGKILL), signalled=True)]  # type: ignore[arg-type]
    _summary(ranks, None, None, [])
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "lzkernel launch: rank 0 exited with code 1: rank 0: RuntimeError: boom")


@pytest.mark.distributed
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_kill_9_of_rank_1_is_named_and_rank_0_exits_at_once(tmp_path: Path) -> None:
    import psutil

    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out", run={"max_train_iters": 10_000, "checkpoint_every": 1000},
                      comm={"name": "gloo", "timeout_s": 30})
    proc = popen(["launch", "--nproc", "2", cfg, "-p", "lzk_fault_plugin", "trainer.sleep_s=0.02"], tmp_path,
                 fault_env(), start_new_session=True)
    try:
        metrics = tmp_path / "out" / "metrics.jsonl"
        deadline = time.monotonic() + 90
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 10):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        tree = process_tree(proc.pid)
        rank1 = [p for p in tree[1:] if psutil.Process(p).environ().get("RANK") == "1"]
        assert len(rank1) == 1, tree
        os.kill(rank1[0], signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert time.monotonic() - killed < 10  # the survivor's collective failed at once, not after timeout_s
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("lzkernel launch: rank 1 was killed by SIGKILL, not sent by the launcher"), err[-3000:]
    assert not alive(tree)
