"""Random openings: every new episode of a collector's vector env starts after k uniformly random
legal moves, k drawn uniformly from 0 … ``max_moves`` per episode.

The positions a policy reaches by its own play are few (the strong lines); a learned model must
also answer in the positions that weak play reaches. Starting training games from random
openings spreads the data over them, as Atari's random no-op starts and the randomised openings
of board-game programs do. The opening moves are not training data: the collector sees the
position after them as the episode's first observation, and its trajectories start there. Only
collectors use this (``collector.opening_moves``); evaluators always play from the game's start.

Accounting: the opening moves are counted in :attr:`RandomOpenings.opening_steps`; the collector
reports them as ``collect/opening_steps`` and includes them in ``collect/env_steps`` (moves made
in the env), while ``run.env_steps`` counts the transitions returned, as it leaves out a bot's
moves in the versus collector. ``episode_return``/``episode_length`` of a finished episode are
the env's own, for the whole game, the opening included. An opening move that ends the episode
(in games that can end that fast) discards that game and draws a new opening.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from lzkernel import ResumableVectorEnv, StepBatch, VectorEnv, generator_state, set_generator_state

#: Openings drawn again for one row after this many that ended the game, before giving up.
_MAX_REDRAWS = 100


class RandomOpenings:
    """A :class:`~lzkernel.VectorEnv` over ``venv`` whose every new episode (at :meth:`reset` and
    at each auto-reset) first plays k ~ U{0, …, max_moves} uniformly random legal moves drawn
    with ``rng``. Rows that do not start an episode in a call are left as ``venv`` returns them."""

    def __init__(self, venv: VectorEnv, max_moves: int, rng: np.random.Generator) -> None:
        if max_moves < 0:
            raise ValueError(f"opening moves must be >= 0, got {max_moves}")
        self.venv = venv
        self.num_envs = venv.num_envs
        self.max_moves = max_moves
        self.rng = rng
        self.opening_steps = 0  # random moves played so far (all rows)

    def _open(self, batch: StepBatch, rows: np.ndarray) -> StepBatch:
        """Play the openings of the episodes that start in ``rows`` of ``batch``; the batch with
        the rows' positions after them (rewards, ends and returns of ``batch`` unchanged; env
        restarts during the openings added to ``restarted``)."""
        todo = np.zeros(self.num_envs, np.int64)  # [E] opening moves still to play
        todo[rows] = self.rng.integers(0, self.max_moves + 1, size=len(rows))
        redraws = np.zeros(self.num_envs, np.int64)
        restarted = None if batch.restarted is None else batch.restarted.copy()  # [E] int64
        current = batch
        while (active := todo > 0).any():
            actions = np.zeros(self.num_envs, np.int64)
            for i in np.flatnonzero(active):
                actions[i] = self.rng.choice(np.flatnonzero(current.legal[i]))
            current = self.venv.step(actions, active=active)
            ended = (current.terminated | current.truncated) & active
            failed = current.abandoned()  # [E] recreated mid-opening: a new game, and no move was made
            if current.restarted is not None:
                restarted = current.restarted if restarted is None else restarted + current.restarted
            self.opening_steps += int(active.sum()) - int((failed & active).sum())
            todo[active] -= 1
            for i in np.flatnonzero(ended | failed):  # the opening ended the game: a new game, a new opening
                redraws[i] += 1
                todo[i] = 0 if redraws[i] >= _MAX_REDRAWS else self.rng.integers(0, self.max_moves + 1)
        if current is batch:
            return batch
        # final_obs equals obs wherever no episode ended in ``batch`` (the StepBatch contract):
        # only the rows that ended keep their episode's last observation.
        final_obs = current.obs.copy()
        ended = batch.terminated | batch.truncated
        final_obs[ended] = batch.final_obs[ended]
        return replace(batch, obs=current.obs, legal=current.legal, to_play=current.to_play,
                       states=current.states, final_obs=final_obs, restarted=restarted)

    def reset(self) -> StepBatch:
        """Reset every env, then play each one's opening."""
        return self._open(self.venv.reset(), np.arange(self.num_envs))

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """Step ``venv``; the envs whose episode ended there start their next one after an opening."""
        batch = self.venv.step(actions, active=active)
        ended = batch.terminated | batch.truncated
        if active is not None:
            ended &= np.asarray(active, bool)  # an unstepped row cannot have ended an episode
        ended = np.flatnonzero(ended | batch.abandoned())  # a recreated env starts a new episode too
        return self._open(batch, ended) if len(ended) else batch

    def close(self) -> None:
        self.venv.close()


class ResumableRandomOpenings(RandomOpenings):
    """:class:`RandomOpenings` over a :class:`~lzkernel.ResumableVectorEnv`: resumable too (the
    wrapped env's state, the opening RNG's and the opening-move count)."""

    venv: ResumableVectorEnv

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta, arrays = self.venv.state_dict()
        return {"env": meta, "opening_moves": self.max_moves, "opening_rng": generator_state(self.rng),
                "opening_steps": self.opening_steps}, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepBatch:
        """Continue from :meth:`state_dict` (the collector checks that ``opening_moves`` matches)."""
        if "opening_rng" not in meta:
            raise ValueError("env state was saved without random openings: it does not fit this vector env")
        set_generator_state(self.rng, meta["opening_rng"])
        self.opening_steps = int(meta["opening_steps"])
        batch = self.venv.load_state_dict(meta["env"], arrays)
        rows = np.flatnonzero(batch.abandoned())  # restarted while saved: new games, opened as in a step
        return self._open(batch, rows) if len(rows) else batch


def opening_moves_of(env_meta: dict[str, Any]) -> int:
    """The ``opening_moves`` a vector env's saved state (its ``state_dict`` meta) was made with
    (0: no random openings)."""
    return int(env_meta.get("opening_moves", 0)) if "opening_rng" in env_meta else 0


def with_openings(venv: VectorEnv, max_moves: int, rng: np.random.Generator) -> VectorEnv:
    """``venv`` itself when ``max_moves`` is 0, else it with random openings (resumable when
    ``venv`` is)."""
    if max_moves == 0:
        return venv
    cls = ResumableRandomOpenings if isinstance(venv, ResumableVectorEnv) else RandomOpenings
    return cls(venv, max_moves, rng)
