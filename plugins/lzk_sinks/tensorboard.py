"""TensorBoard event files under ``<run dir>/tb``, written in the calling thread.

Every scalar is written twice: ``<namespace>/<name>`` against env steps, and
``by_iter/<namespace>/<name>`` against train iterations, so both x-axes are one click away.
Each event's own time is the wall clock of its write (TensorBoard's "Relative" and "Wall" axes:
the interruptions of a resumed run included; ``metrics.jsonl``'s ``wall_time`` leaves them out).

A resumed run first cuts, from the event files already in ``tb/``, the events written after its
checkpoint was saved (by the wall clock: the checkpoint's ``meta.json`` ``time``): the stretch
that the run records again (or, resumed from an earlier checkpoint, abandons), which would
otherwise be drawn twice, the second line going back over the first. Each file is rewritten to a
temporary and renamed over the old one; a TensorBoard that was reading it picks the change up
when restarted. ``metrics.jsonl`` keeps the abandoned records (``lzk_sinks.jsonl``). Events are
flushed after each checkpoint, so what preceded a checkpoint is on disk before a crash can cut it.

tensorboardX's file format (``EventsWriter``) is used without its ``SummaryWriter``: that one
writes from a background thread, so a full disk there crashed the thread with a traceback of
its own, and once its bounded queue filled the training thread blocked forever in
``add_scalar``. Here a write error is an ``OSError`` naming the event file, raised in the hook
call, and the run ends with one line naming the path. Files are flushed (and fsynced) every
:data:`FLUSH_S` seconds, after every evaluation and at the end.
"""
from __future__ import annotations

import math
import socket
import struct
import time
from pathlib import Path
from typing import Any, Mapping

from lzkernel import hookimpl
from lzkernel.checkpoint import write_bytes_atomic

#: Seconds between flushes (tensorboardX's ``flush_secs``).
FLUSH_S = 10.0


class EventFile:
    """One ``events.out.tfevents.*`` file, appended to synchronously."""

    def __init__(self, logdir: Path) -> None:
        from tensorboardX.event_file_writer import EventsWriter

        logdir.mkdir(parents=True, exist_ok=True)
        # tensorboardX names the file by the second and the host, and opens it with "wb": a resume
        # started within the second of the previous start would empty that start's file.
        stamp, suffix = f"events.out.tfevents.{str(time.time())[:10]}.{socket.gethostname()}", ""
        while (logdir / (stamp + suffix)).exists():
            suffix = f".{int(suffix[1:] or 0) + 1}"
        self._writer = EventsWriter(str(logdir / "events"), suffix)  # writes the file-version event
        self.path = self._writer._file_name
        self._next_flush = time.monotonic() + FLUSH_S

    def scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboardX.proto import event_pb2
        from tensorboardX.summary import scalar

        event = event_pb2.Event(wall_time=time.time(), step=int(step), summary=scalar(tag, value))
        self._io(self._writer.write_event, event)
        if time.monotonic() >= self._next_flush:
            self.flush()

    def flush(self) -> None:
        self._io(self._writer.flush)
        self._next_flush = time.monotonic() + FLUSH_S

    def close(self) -> None:
        self._io(self._writer.close)

    def _io(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except OSError as exc:  # buffered writes fail without a file name: give it one
            if exc.filename is None:
                exc.filename = self.path
            raise


def _records(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """The complete TFRecords of an event file's bytes as (start, end) offsets, and the offset
    where the complete records end (``len(data)`` unless the file is cut inside a record).
    Each record is a little-endian uint64 length, its masked CRC, the payload and its CRC."""
    out, pos = [], 0
    while pos + 12 <= len(data):  # a record's 12-byte header is there
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        if pos + 12 + n + 4 > len(data):
            break  # its payload or CRC is not
        out.append((pos, pos + 12 + n + 4))
        pos += 12 + n + 4
    return out, pos


def truncate_after(logdir: Path, wall_time: float) -> int:
    """Drop the summary events written after ``wall_time`` (seconds since the epoch) from every
    ``events.out.tfevents.*`` file directly under ``logdir``; the others are kept byte for byte
    (CRCs included). A file that loses events is rewritten to a temporary, fsynced and renamed
    over itself; one left with no summary event is removed. Returns the number of events dropped.
    A partial record at a file's end (its writer killed) goes with the dropped tail."""
    from tensorboardX.proto import event_pb2

    dropped = 0
    for f in sorted(Path(logdir).glob("events.out.tfevents.*")):
        data = f.read_bytes()
        spans, end = _records(data)
        kept, summaries, cut = [], 0, 0
        for start, stop in spans:
            event = event_pb2.Event.FromString(data[start + 12:stop - 4])
            if event.HasField("summary") and event.wall_time > wall_time:
                cut += 1
                continue
            summaries += event.HasField("summary")
            kept.append(data[start:stop])
        if not cut and end == len(data):
            continue
        dropped += cut
        if summaries:
            write_bytes_atomic(f, b"".join(kept))
        else:
            f.unlink()
    return dropped


def read_scalars(logdir: Path, *, allow_partial: bool = False) -> dict[str, list[tuple[int, float]]]:
    """tag → [(step, value)] in file order, from the ``events.out.tfevents.*`` files directly
    under ``logdir`` (ours or any TensorBoard writer's, e.g. LightZero's ``log/serial``).

    Each TFRecord is a little-endian uint64 length, its masked CRC, the ``Event`` proto and the
    proto's CRC; CRCs are not checked. A file cut inside a record (its writer still running or
    killed) raises ``ValueError`` naming the file, unless ``allow_partial``, which keeps the
    complete records before the cut.
    """
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(Path(logdir).glob("events.out.tfevents.*")):
        data = f.read_bytes()
        spans, pos = _records(data)
        for start, stop in spans:
            event = event_pb2.Event.FromString(data[start + 12:stop - 4])
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
        if pos != len(data) and not allow_partial:
            raise ValueError(f"{f}: ends inside a record at byte {pos} of {len(data)}")
    return out


#: run → its event file, or the ``tb`` directory until the first scalar: the file is opened
#: lazily, so a run that records nothing (a resume whose budget is already spent) adds no
#: empty event file to ``tb/``.
_writers: dict[int, EventFile | Path] = {}


#: resumed run → the wall-clock time (seconds since the epoch) its checkpoint was saved at,
#: until its first scalar cuts the event files there
_resumed: dict[int, float] = {}


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.dir is None:
        return
    _writers[id(run)] = run.dir / "tb"
    if run.resume_path is not None:
        saved = _saved_at(run)
        if saved is not None:
            _resumed[id(run)] = saved


def _saved_at(run: Any) -> float | None:
    """When ``run``'s checkpoint was saved (its ``meta.json`` ``time``; that file's modification
    time for a meta without it), seconds since the epoch; None when neither can be read."""
    saved = run.resume_meta.get("time")
    if isinstance(saved, (int, float)):
        return float(saved)
    try:
        return (Path(run.resume_path) / "meta.json").stat().st_mtime
    except OSError:
        return None


def _writer(run: Any) -> EventFile | None:
    """The run's event file, opened at its first use (a resumed run first cuts the events
    written after its checkpoint from the files there); None for a run without a directory."""
    writer = _writers.get(id(run))
    if isinstance(writer, Path):
        saved = _resumed.pop(id(run), None)
        if saved is not None and writer.is_dir():
            truncate_after(writer, saved)
        writer = _writers[id(run)] = EventFile(writer)
    return writer


def _write(run: Any, metrics: Mapping[str, float]) -> EventFile | None:
    writer = _writer(run)
    if writer is None:
        return None
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            continue
        writer.scalar(key, value, run.env_steps)
        writer.scalar(f"by_iter/{key}", value, run.train_iter)
    return writer


@hookimpl
def lzkernel_after_collect(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, metrics)


@hookimpl
def lzkernel_after_train(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, metrics)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    writer = _write(run, metrics)
    if writer is not None:
        writer.flush()


@hookimpl
def lzkernel_checkpoint_saved(run: Any, path: Path) -> None:
    writer = _writers.get(id(run))
    if isinstance(writer, EventFile):
        writer.flush()  # what preceded the checkpoint is on disk: a resume keeps it (module docstring)


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    _resumed.pop(id(run), None)
    writer = _writers.pop(id(run), None)
    if not isinstance(writer, EventFile):
        return
    try:
        writer.close()
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
