"""How a vector env answers an env that raises (RELIABILITY R5): the policy, the counts, the wait.

:class:`GymVectorEnv` (gymnasium and Atari) recreates an env that raised in ``reset`` or ``step``
as :class:`EnvRestarts` allows; :class:`RestartBook` keeps the counts that decide it (per env:
restarts in a row, restarts ever, the first failure of the row) and survives a checkpoint, so a
resumed run restarts, and stops restarting, where the run it continues would have.

Shape letters: E envs.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lzkernel import progressed

log = logging.getLogger("lzkernel")

#: The longest wait before recreating an env, however many restarts in a row came before.
MAX_BACKOFF_S = 60.0


@dataclass(frozen=True)
class EnvRestarts:
    """Up to ``max_restarts`` times in a row per env (the count starts again when one of its
    episodes ends), an env that raised is closed and made anew after ``backoff_s`` seconds
    (doubling with each restart in a row, at most :data:`MAX_BACKOFF_S`); the new env starts
    from a 31-bit seed derived from (vector seed, env index, restart number). Past that, or with
    ``max_restarts`` 0, the error ends the run. Only exceptions the env raises are restarted:
    what it returns wrongly (a non-finite value, a bad shape or mask) is a bug of the env and
    always ends the run."""

    max_restarts: int = 0
    backoff_s: float = 1.0


#: The longest sleep of :func:`pause` between two signs of progress.
PAUSE_SLICE_S = 0.25


def pause(seconds: float) -> None:
    """Sleep ``seconds`` in slices of at most :data:`PAUSE_SLICE_S`, telling the run's stall
    watchdog before and after each that the run is alive (a backoff is a deliberate, bounded
    wait, not a hang; in an env worker the signs reach the trainer, :mod:`lzk_envs.env_worker`)."""
    progressed()
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, PAUSE_SLICE_S))
        progressed()


def restart_seed(seed: int, index: int, restart: int) -> int:
    """The seed of env ``index``'s ``restart``-th new env in a vector env seeded ``seed``."""
    return int(np.random.SeedSequence([seed, index, restart]).generate_state(1)[0] >> 1)


class RestartBook:
    """The restart counts of one vector env's E envs, and the decision made from them."""

    def __init__(self, policy: EnvRestarts, seed: int, num_envs: int, first_index: int = 0) -> None:
        """``seed``: the vector seed; env i is env ``first_index + i`` of the run (its restart seeds')."""
        self.policy, self.seed, self.first_index = policy, seed, first_index
        self.in_a_row = [0] * num_envs  # restarts of env i since its last finished episode
        self.restarts_of = [0] * num_envs  # restarts of env i ever (its restart seeds' index)
        self.first: list[str | None] = [None] * num_envs  # the first failure of env i's row
        self.failures = 0  # restarts, all envs
        self.recreated = np.zeros(num_envs, np.int64)  # [E] restarts since the last take()

    def fail(self, i: int, exc: Exception, what: str, error: type[Exception]) -> int:
        """Env i raised ``exc`` (``what``: where, naming the env): count it, wait the backoff,
        and return the seed its new env starts from; or raise ``error`` (chained to ``exc``)
        once the restarts in a row are spent, naming the first failure of the row too."""
        wait = self.count(i, exc, what, error)
        log.warning("%s; recreating the env (restart %d of at most %d in a row, waiting %.1f s first)",
                    what, self.in_a_row[i], self.policy.max_restarts, wait)
        pause(wait)
        return self.seed_of(i)

    def count(self, i: int, exc: Exception, what: str, error: type[Exception]) -> float:
        """:meth:`fail`'s bookkeeping without the wait: count env i's failure and return the
        backoff it calls for in seconds, or raise ``error`` once the restarts in a row are spent."""
        limit = self.policy.max_restarts
        if self.in_a_row[i] == 0:
            self.first[i] = what
        if self.in_a_row[i] >= limit:
            message = what.rstrip(".")
            if limit:
                message += f"; {limit} restart{'s' if limit != 1 else ''} in a row did not help (env.max_restarts)"
                if self.first[i] != what:
                    message += f"; the first failure: {self.first[i]}"
            raise error(message) from exc
        self.in_a_row[i] += 1
        self.restarts_of[i] += 1
        self.failures += 1
        self.recreated[i] += 1
        return min(self.policy.backoff_s * 2.0 ** min(self.in_a_row[i] - 1, 32), MAX_BACKOFF_S)  # no overflow

    def seed_of(self, i: int) -> int:
        """The seed env i's newest env starts from (:func:`restart_seed` of its restarts so far)."""
        return restart_seed(self.seed, self.first_index + i, self.restarts_of[i])

    def episode_ended(self, i: int) -> None:
        """Env i finished an episode: its next failure is the first of a new row."""
        self.in_a_row[i], self.first[i] = 0, None

    def take(self) -> np.ndarray | None:
        """[E] int64 restarts per env since the last call (None: none), and start counting anew."""
        if not self.recreated.any():
            return None
        out, self.recreated = self.recreated, np.zeros_like(self.recreated)
        return out

    def state(self) -> dict[str, Any]:
        return {"in_a_row": list(self.in_a_row), "restarts_of": list(self.restarts_of), "failures": self.failures,
                "first": list(self.first)}

    def load(self, state: dict[str, Any] | None) -> None:
        """Continue from :meth:`state` (None: a state saved before restarts existed; none happened)."""
        if state is None:
            return
        self.in_a_row = [int(x) for x in state["in_a_row"]]
        self.restarts_of = [int(x) for x in state["restarts_of"]]
        self.failures = int(state["failures"])
        self.first = list(state["first"])
