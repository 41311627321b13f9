"""Errors the kernel raises, and the exit code of a run that ended with one. A
:class:`ConfigError` always means exit code 2."""
from __future__ import annotations

import errno
import os

EXIT_CONFIG = 2
EXIT_FAILURE = 1
#: errno values that mean "this path cannot be written" (the disk, the permissions or the path),
#: reported as one line naming the path (exit 2) rather than as a crash.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG,
                            errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ENOENT, errno.EIO})


class LzkernelError(Exception):
    """Base class of every error the kernel raises on purpose."""


class ConfigError(LzkernelError):
    """Bad user input: config file, override, component name, resume path.

    The CLI prints ``str(error)`` without a traceback and exits with code 2. ``problems`` holds
    every individual message when several were collected at once.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]
        #: Tracebacks behind the message (e.g. of plugins that failed to import), printed by
        #: ``--traceback`` only.
        self.details = ""


class PluginError(LzkernelError):
    """A plugin could not be imported or registered, or two plugins claim the same name."""


class StopRequested(LzkernelError):
    """A stop signal arrived during a long phase that can be abandoned (an evaluation): the phase
    stopped part-way and recorded nothing, so a resumed run plays it again. The trainer catches it
    and saves the last completed iteration, as for a signal between phases."""


class CheckpointError(LzkernelError):
    """A checkpoint is missing, incomplete, corrupt or incompatible."""


#: How the note that names the plugin an exception came from starts (:func:`name_origin`).
ORIGIN_NOTE = "raised by "


def name_origin(exc: BaseException, where: str) -> None:
    """Note on ``exc`` which plugin's code raised it (``where``, e.g. "evaluator 'x' (plugin 'y')
    while being built"). The innermost naming wins: a component built inside another's factory
    is the one named. :func:`error_line` shows it."""
    if not any(n.startswith(ORIGIN_NOTE) for n in getattr(exc, "__notes__", ())):
        exc.add_note(ORIGIN_NOTE + where)


def error_line(exc: BaseException) -> str:
    """``Type: message`` of a run's error, with the plugin that raised it where known: the text
    of the CLI's last error line and of ``summary.json``'s ``error``."""
    origin = [n for n in getattr(exc, "__notes__", ()) if n.startswith(ORIGIN_NOTE)]
    return f"{type(exc).__name__}: {exc}" + (f" ({origin[0]})" if origin else "")


def storage_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` (itself, its cause or its context) that says a path cannot be
    written (:data:`STORAGE_ERRNOS`), or None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
            return e
        e = e.__cause__ or e.__context__
    return None


def describe_storage_error(exc: OSError, out_dir: str) -> str:
    """One line naming the path (the run directory when the OS did not say which file)."""
    reason = exc.strerror or os.strerror(exc.errno or 0)
    if exc.filename is not None:
        return f"cannot write {exc.filename}: {reason} (run.out_dir '{out_dir}')"
    return f"writing under run.out_dir '{out_dir}' failed: {reason}"


class Stalled(KeyboardInterrupt):
    """The stall watchdog's interruption of an embedded run (:mod:`lzkernel.watchdog`): a
    KeyboardInterrupt, so that no ``except Exception`` in a trainer or a plugin swallows it; the
    run fails with it (exit code 1, as the CLI's stall)."""

    timeout_s = 0.0  # the watchdog's run.stall_timeout_s (set when it interrupts)

    def __str__(self) -> str:
        return f"no progress for {self.timeout_s:g} s (run.stall_timeout_s): the run was interrupted"


def exit_code(error: BaseException | None, stop_signal: int | None = None) -> int:
    """The exit code ``lzkernel run`` gives a run that ended with ``error`` (None: none) or was
    stopped by ``stop_signal``: 2 for configuration, plugin and storage errors, 130 for Ctrl-C
    seen as KeyboardInterrupt, 1 for any other error, 128 + the signal, else 0."""
    if error is None:
        return 0 if stop_signal is None else 128 + stop_signal
    if isinstance(error, Stalled):
        return EXIT_FAILURE
    if isinstance(error, KeyboardInterrupt):
        return 130
    if isinstance(error, (ConfigError, PluginError)) or storage_error(error) is not None:
        return EXIT_CONFIG
    return EXIT_FAILURE
