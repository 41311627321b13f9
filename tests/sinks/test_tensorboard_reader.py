"""``lzk_sinks.tensorboard.read_scalars`` reads back what ``EventFile`` wrote, and a file cut
inside a record (a killed writer) is refused or, when asked, read up to the cut."""
from __future__ import annotations

from pathlib import Path

import pytest

from lzk_sinks.tensorboard import EventFile, read_scalars


def _write(logdir: Path, points: list[tuple[str, float, int]]) -> Path:
    writer = EventFile(logdir)
    for tag, value, step in points:
        writer.scalar(tag, value, step)
    writer.close()
    return Path(writer.path)


def test_reads_back_every_scalar_in_order(tmp_path: Path) -> None:
    _write(tmp_path, [("train/a", 1.5, 10), ("eval/b", -2.0, 10), ("train/a", 0.25, 20)])
    assert read_scalars(tmp_path) == {"train/a": [(10, 1.5), (20, 0.25)], "eval/b": [(10, -2.0)]}


def test_a_cut_file_is_refused_unless_partial_reads_are_allowed(tmp_path: Path) -> None:
    path = _write(tmp_path, [("x", 1.0, 1), ("x", 2.0, 2), ("x", 3.0, 3)])
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # inside the last record
    with pytest.raises(ValueError, match="ends inside a record"):
        read_scalars(tmp_path)
    assert read_scalars(tmp_path, allow_partial=True) == {"x": [(1, 1.0), (2, 2.0)]}
