"""One run per directory: an exclusive lock on ``run.out_dir`` held for the life of a run.

:func:`acquire` creates the directory if needed and takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on
``<out_dir>/.lock``, then writes the holder's pid, host and start time into it. It is the first
thing a run writes, so a run that cannot have the directory (another run holds it, it cannot be
created or written) stops with a :class:`ConfigError` (exit 2) naming the path, before touching
anything else.

Invariants and reasons:

* The lock is the kernel's ``flock``, so it is released by the operating system whenever the
  holder's process ends, however it ends (exception, signal, ``os._exit``, ``kill -9``). A
  ``.lock`` file left behind by a dead run is therefore not a lock at all: the next run takes it
  and logs that it recovered it. No pid-liveness guessing is needed.
* On release the file is unlinked *before* its descriptor is closed. A run that opened the old
  file and gets the lock after that close finds that ``.lock`` is no longer the file it holds
  (another inode, or none) and tries again, so two runs never both believe they hold it.
* Ranks of one multi-rank run share a directory but only rank 0 writes it: processes whose
  ``RANK`` is not 0 do not lock. Ranks that are threads of one process (the ``threads`` comm
  backend) share one lock through a per-process reference count.
* Filesystems without ``flock`` support (some network or FUSE filesystems) get a warning, not
  a refusal: the run proceeds unprotected.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lzkernel.errors import ConfigError

log = logging.getLogger("lzkernel")

LOCK_NAME = ".lock"

#: What a run writes into its directory besides ``ckpt/`` and the lock: the kernel's run files
#: and the first-party sinks' (``metrics.jsonl``, ``tb/``, ``summary.json``).
RUN_FILES = ("config.yaml", "overrides.txt", "command.txt", "versions.json", "resolved.json", "seeds.json",
             "metrics.jsonl", "tb", "summary.json")

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


@dataclass
class RunDirLock:
    """A held lock on ``directory`` (see :func:`acquire`)."""

    directory: Path
    fd: int | None
    created_dir: bool
    count: int = 1

    @property
    def path(self) -> Path:
        return self.directory / LOCK_NAME


_held: dict[str, RunDirLock] = {}
_held_guard = threading.Lock()


def rank_hint() -> int:
    """This process's rank as a launcher announced it (``RANK``; 0 when unset or unreadable)."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def lock_stamp(directory: Path) -> tuple[int, str, float] | None:
    """(pid, host, start time) written in ``directory``'s lock file, or None when there is none
    (no run holds the directory, or it is unreadable). The file stays behind a run killed by
    ``kill -9``: whether its pid still lives is the caller's question. Reads only: taking the
    lock, even shared, could make a run starting at that moment fail to get it."""
    try:
        return _parse_stamp((directory / LOCK_NAME).read_bytes())
    except OSError:
        return None


def _parse_stamp(data: bytes) -> tuple[int, str, float] | None:
    """The ``pid\\nhost\\ntime`` a run writes into its lock file (:func:`_lock_file`), or None."""
    try:
        text = data.decode("utf-8", "replace").split()
        return int(text[0]), text[1], float(text[2])
    except (ValueError, IndexError):
        return None


def _holder(fd: int) -> str:
    """What the lock file says about its holder: ``pid N on HOST, started TIME`` (best effort)."""
    try:
        stamp = _parse_stamp(os.pread(fd, 512, 0))
    except OSError:
        stamp = None
    if stamp is None:
        return "another process"
    pid, host, started = stamp
    return f"pid {pid} on {host}, started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"


def _make_dir(directory: Path) -> bool:
    """Create ``directory`` (and parents); True when this call created it."""
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"run.out_dir '{directory}' is an existing file, not a directory; choose another "
                          "directory (run.out_dir=...)")
    if directory.is_dir():
        return False
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        if directory.is_dir():
            return False  # another process made it first: fine, the lock decides
        raise ConfigError(f"run.out_dir '{directory}' is an existing file, not a directory") from None
    except OSError as exc:
        raise ConfigError(f"run.out_dir '{directory}': cannot create the directory: "
                          f"{exc.strerror or exc} ({exc.filename or directory})") from None
    return True


def acquire(out_dir: str | Path) -> RunDirLock:
    """Lock ``out_dir`` for this run, creating it if needed; :class:`ConfigError` if another run
    holds it or it cannot be created or written."""
    directory = Path(out_dir)
    key = os.path.realpath(directory)
    with _held_guard:
        held = _held.get(key)
        if held is not None:  # another rank-thread of this process already holds it
            held.count += 1
            return held
        created = _make_dir(directory)
        lock = RunDirLock(directory, None, created)
        try:
            lock.fd = _lock_file(lock.path)
        except BaseException:
            _remove_if_empty(lock)
            raise
        _held[key] = lock
        return lock


def _lock_file(path: Path) -> int | None:
    """Open, lock and stamp ``path``; the descriptor (None where locks are unsupported)."""
    directory = path.parent
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise ConfigError(f"run.out_dir '{directory}' is not writable: {exc.strerror or exc} "
                              f"({exc.filename or path})") from None
        if fcntl is None:
            os.close(fd)
            log.warning("no fcntl on this platform: run.out_dir '%s' is not locked", directory)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"run.out_dir '{directory}' is in use by another run ({holder}; lock file {path}); wait for "
                "it to end, or choose another directory (run.out_dir=...)") from None
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                os.close(fd)
                log.warning("run.out_dir '%s' is on a filesystem without file locks (%s): two runs in it "
                            "are not prevented", directory, exc.strerror)
                return None
            os.close(fd)
            raise
        # The previous holder unlinks the file before unlocking it: if ``path`` is no longer the
        # file we locked, we hold a lock on a dead inode. Start again with the current file.
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:
            os.close(fd)
            continue
        break
    stale = _holder(fd)
    if stale != "another process":
        log.info("run.out_dir '%s': recovered the lock of a run that ended without releasing it (%s)",
                 directory, stale)
    stamp = f"{os.getpid()}\n{socket.gethostname()}\n{time.time():.3f}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, stamp, 0)
    except OSError as exc:  # a full disk or quota shows here, before the run starts
        _unlink_own(path, fd)
        os.close(fd)
        raise ConfigError(f"run.out_dir '{directory}' is not writable: {exc.strerror or exc} ({path})") from None
    return fd


def _unlink_own(path: Path, fd: int) -> None:
    """Unlink ``path`` if it is still the file open as ``fd``."""
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


def _remove_if_empty(lock: RunDirLock) -> None:
    """A run that created its directory and wrote nothing leaves no directory behind."""
    if lock.created_dir:
        try:
            lock.directory.rmdir()
        except OSError:
            pass  # not empty (the run wrote files) or already gone


def release(lock: RunDirLock | None) -> None:
    """Release ``lock`` (idempotent; the last sharer of a process releases the file)."""
    if lock is None:
        return
    with _held_guard:
        if lock.count <= 0:
            return
        lock.count -= 1
        if lock.count > 0:
            return
        _held.pop(os.path.realpath(lock.directory), None)
        if lock.fd is not None:
            _unlink_own(lock.path, lock.fd)  # unlink first: see the module docstring
            os.close(lock.fd)
            lock.fd = None
        _remove_if_empty(lock)


def abandoned_dir(parent: Path) -> Path:
    """A new ``abandoned-<time>-<pid>/`` under ``parent``: where what a run set aside goes (the
    files of an earlier start, the later steps of a rewound history); nothing is deleted."""
    dest = parent / f"abandoned-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    dest.mkdir()
    return dest


def set_aside_earlier_start(directory: Path) -> Path | None:
    """Called by a fresh run (no checkpoint to resume) before it writes its run files: an
    earlier start into ``directory`` that left no checkpoint may have left its run files. When
    that start recorded anything (a metric record, a TensorBoard file) they move into
    ``abandoned-<time>-<pid>/`` (returned; nothing is lost), otherwise (a start that failed
    before its first record, e.g. a config error while building the env) they are removed.
    Reason: ``metrics.jsonl`` and ``command.txt`` are appended to and ``overrides.txt`` keeps
    the first invocation's, so without this the new run's files would carry the old start's
    records and overrides. A symbolic link is left where it is (the user put it there: the run
    writes through it)."""
    present = {name: directory / name for name in RUN_FILES
               if (directory / name).exists() and not (directory / name).is_symlink()}
    recorded = ("metrics.jsonl" in present and present["metrics.jsonl"].stat().st_size > 0) or \
        ("tb" in present and any(present["tb"].iterdir()))
    if not recorded:
        for path in present.values():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        return None
    dest = abandoned_dir(directory)
    for path in present.values():
        os.replace(path, dest / path.name)
    log.warning("run.out_dir %s held the files of an earlier start that saved no checkpoint; moved them to %s",
                directory, dest)
    return dest
