"""Errors the kernel raises. A :class:`ConfigError` always means exit code 2."""
from __future__ import annotations


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
