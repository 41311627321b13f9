"""An env worker process: ``python -m lzk_envs.env_worker FD`` (started by :mod:`lzk_envs.workers`).

It talks to its parent only through the socket FD it inherited (RELIABILITY S5: no listening
socket), one request and one reply at a time, as pickled tuples (parent and child are one
program: the same trust domain). The requests: ``("init", spec, count, seed, first_index)``
makes the worker's :class:`~lzk_envs.gym_vector.GymVectorEnv` (``spec.make_local_vector``);
``("reset",)``, ``("step", actions, active)``, ``("state",)``, ``("load", meta, arrays)`` call it;
``("close",)`` closes it and ends the process. A reply is ``("ok", value)`` or ``("error", kind,
message)`` with kind ``config``, ``value`` or ``env``.

Ctrl-C and SIGTERM are the parent's to handle (it saves a checkpoint, which needs this worker's
state): the worker ignores them, and dies with its parent (Linux: PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection
from typing import Any


def _error(exc: BaseException) -> tuple[str, str, str]:
    from lzkernel import ConfigError

    kind = "config" if isinstance(exc, ConfigError) else "value" if isinstance(exc, ValueError) else "env"
    text = str(exc) if kind != "env" or type(exc).__name__ == "EnvError" else f"{type(exc).__name__}: {exc}"
    return ("error", kind, text)


def serve(conn: Connection) -> None:
    """Answer requests until ``close`` or the parent's end of the socket closes."""
    venv: Any = None
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        op = request[0]
        try:
            if op == "init":
                spec, count, seed, first_index = request[1:]
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
            elif op == "close":
                if venv is not None:
                    venv.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"env worker: unknown request {op!r}")
        except Exception as exc:  # noqa: BLE001 - every error goes back to the parent, which raises it
            conn.send(_error(exc))
            continue
        conn.send(("ok", value))


def main(argv: list[str]) -> int:
    from lzkernel.launch import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    serve(Connection(int(argv[0])))
    return 0


if __name__ == "__main__":  # pragma: no cover - runs in the worker process
    sys.exit(main(sys.argv[1:]))
