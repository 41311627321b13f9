"""Which rank the launcher names when several fail: the one with its own error, even when the
teardown's SIGTERM killed it while it shut down and a peer it released exited first; and a
failing rank of a multi-rank run ignores that SIGTERM, so its exit code stays 1.

(The race behind these: rank 1 raises, closes its connection and shuts down; rank 0 gets
PeerFailed and exits at once; the launcher then SIGTERMs rank 1 mid-shutdown. It made
``test_fault_launch.py::test_a_raising_rank_is_named`` fail now and then.)
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lzkernel.launch import _Rank, _summary


class _Proc:
    def __init__(self, returncode: int) -> None:
        self.returncode = returncode


def _rank(r: int, code: int, error: str, error_at: float | None, exited_at: float | None) -> _Rank:
    return _Rank(r, _Proc(code), error_line=error, error_at=error_at, exited_at=exited_at)  # type: ignore[arg-type]


PEER = "lzkernel: error: rank 0: PeerFailed: all_reduce_sum (collective #3) on rank 0 failed after 0.0 s"
OWN = "lzkernel: error: rank 1: RuntimeError: injected fault on rank 1 at iteration 3"


def _last_line(capsys: pytest.CaptureFixture[str], ranks: list[_Rank]) -> tuple[int, str]:
    code = _summary(ranks, None, None, [])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_rank_killed_after_its_own_error_is_the_root_cause(capsys: pytest.CaptureFixture[str]) -> None:
    ranks = [_rank(0, 1, PEER, error_at=10.2, exited_at=10.3), _rank(1, -signal.SIGTERM, OWN, 10.0, None)]
    code, last = _last_line(capsys, ranks)
    assert code == 1
    assert last == ("lzkernel launch: rank 1 failed (then was killed by SIGTERM while it shut down): "
                    "rank 1: RuntimeError: injected fault on rank 1 at iteration 3")


def test_a_rank_killed_without_an_error_of_its_own_is_not_blamed(capsys: pytest.CaptureFixture[str]) -> None:
    ranks = [_rank(0, 1, OWN.replace("rank 1", "rank 0"), 12.0, 12.1), _rank(1, -signal.SIGTERM, "", None, None)]
    assert _last_line(capsys, ranks)[1].startswith("lzkernel launch: rank 0 exited with code 1: rank 0: RuntimeError")


def test_among_own_errors_the_earliest_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    ranks = [_rank(0, 1, OWN.replace("rank 1", "rank 0"), 11.0, 11.5), _rank(1, 1, OWN, 10.0, 12.0)]
    assert _last_line(capsys, ranks)[1].startswith("lzkernel launch: rank 1 exited with code 1")


_CHILD = """
import signal, sys
from pathlib import Path
from lzkernel.config.loader import load_config
from lzkernel.pluginmanager import Kernel
from lzkernel.run import RunContext

class TwoRanks:  # stands in for a two-rank comm backend: the run only asks its size, then closes it
    world_size, rank = 2, 0
    def close(self):
        print("comm closed with SIGTERM ignored:", signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)

kernel = Kernel()
cfg = load_config(Path(sys.argv[1]), [f"run.out_dir={sys.argv[2]}", "run.progress=false"], kernel.registry)
run = RunContext(kernel, cfg).__enter__()
run.comm.close()
run.comm = TwoRanks() if sys.argv[3] == "2" else None
run.close(None if sys.argv[4] == "ok" else RuntimeError("boom"))
print("after close:", signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)
"""


@pytest.mark.parametrize("world_size, outcome, ignored", [("2", "error", True), ("2", "ok", False),
                                                           ("1", "error", False)])
def test_a_failing_rank_of_a_multi_rank_run_ignores_the_teardown_sigterm(
        tmp_path, world_size: str, outcome: str, ignored: bool) -> None:
    """In a child interpreter (signal dispositions are process-wide): closing a multi-rank run
    that failed ignores SIGTERM from before its connection closes (which releases its peers) to
    the end of the process; a run that ended well, or a single-process run, restores the default."""
    config = Path(__file__).resolve().parents[2] / "configs" / "cartpole_rezero_fast.yaml"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(config), str(tmp_path / "run"), world_size, outcome],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    if world_size == "2":
        assert lines[0] == f"comm closed with SIGTERM ignored: {ignored}"
    assert lines[-1] == f"after close: {ignored}"
