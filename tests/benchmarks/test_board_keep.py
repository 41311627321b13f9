"""``--keep KEEP`` of the board-game benchmarks (``tictactoe_solved.py``, ``connect4_vs_mcts.py``):
a seed directory that already exists is refused with one line and exit 2, since its metrics and
checkpoints would be taken for this run's."""
from __future__ import annotations

from pathlib import Path

import pytest

import _results


def test_an_existing_seed_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "seed1").mkdir()
    _results.refuse_taken_keep_dirs(tmp_path, [0, 2])  # free: returns
    _results.refuse_taken_keep_dirs(None, [1])  # no --keep: nothing to check
    with pytest.raises(SystemExit) as e:
        _results.refuse_taken_keep_dirs(tmp_path, [0, 1])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "seed1") in err[0] and "seed0" not in err[0]
