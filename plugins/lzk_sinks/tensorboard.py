"""TensorBoard event files under ``<run dir>/tb``, written in the calling thread.

Every scalar is written twice: ``<namespace>/<name>`` against env steps, and
``by_iter/<namespace>/<name>`` against train iterations, so both x-axes are one click away.

tensorboardX's file format (``EventsWriter``) is used without its ``SummaryWriter``: that one
writes from a background thread, so a full disk there crashed the thread with a traceback of
its own, and once its bounded queue filled the training thread blocked forever in
``add_scalar``. Here a write error is an ``OSError`` naming the event file, raised in the hook
call, and the run ends with one line naming the path. Files are flushed (and fsynced) every
:data:`FLUSH_S` seconds, after every evaluation and at the end.
"""
from __future__ import annotations

import math
import struct
import time
from pathlib import Path
from typing import Any, Mapping

from lzkernel import hookimpl

#: Seconds between flushes (tensorboardX's ``flush_secs``).
FLUSH_S = 10.0


class EventFile:
    """One ``events.out.tfevents.*`` file, appended to synchronously."""

    def __init__(self, logdir: Path) -> None:
        from tensorboardX.event_file_writer import EventsWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self._writer = EventsWriter(str(logdir / "events"))  # writes the file-version event
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
        pos = 0
        while pos + 12 <= len(data):  # a record's 12-byte header is there
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            if pos + 12 + n + 4 > len(data):
                break  # its payload or CRC is not
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
        if pos != len(data) and not allow_partial:
            raise ValueError(f"{f}: ends inside a record at byte {pos} of {len(data)}")
    return out


#: run → its event file, or the ``tb`` directory until the first scalar: the file is opened
#: lazily, so a run that records nothing (a resume whose budget is already spent) adds no
#: empty event file to ``tb/``.
_writers: dict[int, EventFile | Path] = {}


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.dir is None:
        return
    _writers[id(run)] = run.dir / "tb"


def _writer(run: Any) -> EventFile | None:
    """The run's event file, opened at its first use; None for a run without a directory."""
    writer = _writers.get(id(run))
    if isinstance(writer, Path):
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
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    writer = _writers.pop(id(run), None)
    if not isinstance(writer, EventFile):
        return
    try:
        writer.close()
    except OSError:
        if error is None:
            raise  # a run that ends because of another error reports that one, not this
