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


def test_a_second_file_in_the_same_second_does_not_empty_the_first(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """tensorboardX names event files by the second; a resume within it opened the same name with
    "wb" and emptied the earlier file."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.25)
    first = _write(tmp_path, [("x", 1.0, 1)])
    second = _write(tmp_path, [("x", 2.0, 2)])
    assert first != second and second.name == first.name + ".1"
    assert read_scalars(tmp_path) == {"x": [(1, 1.0), (2, 2.0)]}


def test_truncate_after_drops_only_the_later_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from lzk_sinks.tensorboard import truncate_after

    now = [100.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    writer = EventFile(tmp_path)
    for step in range(1, 6):
        now[0] = 100.0 + step
        writer.scalar("x", float(step), step)
    writer.close()
    path = Path(writer.path)
    path.write_bytes(path.read_bytes() + b"\x05\x00")  # a killed writer's partial record
    assert truncate_after(tmp_path, 103.5) == 2
    assert read_scalars(tmp_path) == {"x": [(1, 1.0), (2, 2.0), (3, 3.0)]}  # whole records only now
    assert truncate_after(tmp_path, 103.5) == 0
    assert truncate_after(tmp_path, 50.0) == 3 and not path.exists()  # nothing left: the file goes


def test_a_checkpoint_flushes_the_events_before_it(tmp_path: Path) -> None:
    """A resume keeps the events written before its checkpoint; they must be on disk by then, not
    in a buffer that a crash loses (the sink flushed every FLUSH_S seconds only)."""
    from types import SimpleNamespace

    from lzk_sinks import tensorboard

    run = SimpleNamespace(dir=tmp_path, resume_path=None, env_steps=10, train_iter=1)
    tensorboard.lzkernel_run_start(run=run)
    tensorboard.lzkernel_after_train(run=run, metrics={"train/loss": 0.5})
    tensorboard.lzkernel_checkpoint_saved(run=run, path=tmp_path / "ckpt" / "step_000000000001")
    try:
        assert read_scalars(tmp_path / "tb") == {"train/loss": [(10, 0.5)], "by_iter/train/loss": [(1, 0.5)]}
    finally:
        tensorboard.lzkernel_run_end(run=run, error=None)
