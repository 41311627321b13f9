"""An env worker process: ``python -m lzk_envs.env_worker FD`` (started by :mod:`lzk_envs.workers`).

It talks to its parent only through the socket FD it inherited (RELIABILITY S5: no listening
socket), one request and one reply at a time, as pickled tuples (parent and child are one
program: the same trust domain). The requests: ``("init", spec, count, seed, first_index,
secrets)`` makes the worker's :class:`~lzk_envs.gym_vector.GymVectorEnv`
(``spec.make_local_vector``) and remembers the run's secret values (its log lines are scrubbed);
``("reset",)``, ``("step", actions, active)``, ``("state",)``, ``("load", meta, arrays)`` and
``("restart", book, times)`` (``start_anew``: the worker replaces one that was lost) call it;
``("close",)`` closes it and ends the process. A reply is ``("ok", value, book)`` (book: the
restart counts, :meth:`~lzk_envs.restarts.RestartBook.state`, after a call that restarted an env;
else None) or ``("error", kind, message, traceback)`` with kind ``config``, ``value`` or ``env``. While a request makes progress
(an env restart's wait, a long replay: ``lzkernel.progressed``), a thread sends ``("alive",)``
about every quarter second, so the parent neither counts it as hung nor lets its stall watchdog fire.

The worker runs in its own session (a Ctrl-C or a SIGTERM to the trainer's process group does
not reach it: the trainer handles them and saves this worker's state), ignores SIGINT and
SIGTERM besides, keeps its socket from any process it starts, and dies with its parent (Linux:
PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

#: Seconds between two "alive" messages while a request makes progress.
BEAT_S = 0.25


def _error(exc: BaseException) -> tuple[str, str, str, str]:
    from lzkernel import ConfigError

    kind = "config" if isinstance(exc, ConfigError) else "value" if isinstance(exc, ValueError) else "env"
    text = str(exc) if kind != "env" or type(exc).__name__ == "EnvError" else f"{type(exc).__name__}: {exc}"
    return ("error", kind, text, "".join(traceback.format_exception(exc)))


class _Sender:
    """The socket's sending side, shared by the serving loop and the heartbeat thread."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.lock = conn, threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self.lock:
            self.conn.send(message)


def _beat(sender: _Sender, stop: threading.Event) -> None:
    """Send ``("alive",)`` whenever this process made progress since the last beat."""
    from lzkernel.watchdog import last_progress

    seen = last_progress()
    while not stop.wait(BEAT_S):
        if last_progress() != seen:
            seen = last_progress()
            try:
                sender.send(("alive",))
            except OSError:
                return


def serve(conn: Connection) -> None:
    """Answer requests until ``close`` or the parent's end of the socket closes."""
    from lzkernel import StepBatch

    venv: Any = None
    sender, stop = _Sender(conn), threading.Event()
    threading.Thread(target=_beat, args=(sender, stop), daemon=True, name="lzk-env-worker-beat").start()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - a request that cannot be read: say so, not die
            sender.send(_error(exc))
            continue
        op = request[0]
        try:
            if op == "init":
                spec, count, seed, first_index, secrets = request[1:]
                from lzkernel.config.redact import remember

                remember(secrets)
                value = None
                venv = spec.make_local_vector(count, seed, first_index)
            elif op == "reset":
                value = venv.reset()
            elif op == "step":
                value = venv.step(request[1], request[2])
            elif op == "state":
                value = venv.state_dict()
            elif op == "load":
                value = venv.load_state_dict(request[1], request[2])
            elif op == "restart":
                value = venv.start_anew(request[1], request[2])
            elif op == "close":
                stop.set()
                if venv is not None:
                    venv.close()
                sender.send(("ok", None, None))
                return
            else:
                raise ValueError(f"env worker: unknown request {op!r}")
        except Exception as exc:  # noqa: BLE001 - every error goes back to the parent, which raises it
            sender.send(_error(exc))
            continue
        # A batch with restarts carries the restart counts: the parent's copy, from which it
        # restarts this worker's envs should the worker itself be lost.
        book = venv.book.state() if isinstance(value, StepBatch) and value.restarted is not None else None
        sender.send(("ok", value, book))


def main(argv: list[str]) -> int:
    from lzkernel.config.redact import ScrubFilter
    from lzkernel.launch import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    fd = int(argv[0])
    os.set_inheritable(fd, False)  # a process an env starts must not hold the socket open
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s (env worker %(process)d): %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubFilter())
    serve(Connection(fd))
    return 0


if __name__ == "__main__":  # pragma: no cover - runs in the worker process
    sys.exit(main(sys.argv[1:]))
