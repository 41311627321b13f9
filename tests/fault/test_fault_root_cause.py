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


@pytest.mark.parametrize("world_size, ignored", [("2", True), ("1", False)])
def test_a_failing_rank_of_a_multi_rank_run_ignores_sigterm(world_size: str, ignored: bool) -> None:
    """In a child interpreter (signal dispositions are process-wide): after ``_report_failure``
    SIGTERM is ignored under WORLD_SIZE > 1 and left alone in a single-process run."""
    code = (
        "import os, signal; os.environ['WORLD_SIZE'] = %r\n"
        "from lzkernel import cli\n"
        "assert cli._report_failure(RuntimeError('boom'), object()) == 1\n"
        "print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)\n" % world_size
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ignored)
    assert "lzkernel: error: rank 0: RuntimeError: boom" in out.stderr
