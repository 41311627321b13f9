"""Checkpoints and resume of the loop skeleton: what a checkpoint holds and how a run continues
from one (single and multi-rank).

A checkpoint (written by rank 0 through ``run.save_checkpoint``) holds the policy's state, the
collector's and evaluator's, the epoch and where inside it the loop stood (``progress``), the
train metrics not yet logged (``pending``), the sample RNG, the phase timers, the trainer's
``extra_state()``, and, with ``run.save_buffer``, the arrays of everything that carries data from
one iteration to the next: the replay buffer (``buffer/``, with the pieces its cutters keep back)
and the collector's work in progress (``collector/``: its envs' running episodes, frame windows
and unfinished pieces, when it is a :class:`lzkernel.ResumableCollector`). With those a resume
is exact (``docs/architecture.md``, Resume). The ``best`` checkpoint holds no arrays.
With several ranks it also holds every other rank's own state (sample and policy RNGs,
collector counters and episodes, replay buffer) under ``ranks`` / ``rank<r>/``; resume requires
the same world size.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any

import numpy as np

from lzk_loop import ranks
from lzkernel import ConfigError, ResumableCollector, generator_state, set_generator_state

log = logging.getLogger("lzkernel")


class LoopCheckpoints:
    """The checkpoint half of :class:`~lzk_loop.skeleton.LoopTrainer` (a mixin: it reads the
    trainer's ``run``, ``policy``, ``buffer``, ``collector``, ``evaluator``, ``epoch``,
    ``sample_rng`` and ``timer``)."""

    run: Any
    buffer_restored: bool = False  # a resume loaded this rank's replay buffer
    _saved_iter: int = -1  # train_iter of the newest checkpoint this process wrote
    _progress: tuple[int, int, bool] | None = None  # where inside an epoch (LoopTrainer._progress)

    def extra_state(self) -> dict[str, Any]:
        """Subclasses' own counters to checkpoint (plain values)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def _save_after_error(self) -> None:
        """A checkpoint of the iterations completed before an error (single process), unless the
        newest checkpoint already holds them or saving fails too (say so, keep the first error).
        It holds no running episodes: the error may have left the envs half-stepped, so a run
        resumed from it starts fresh ones (it is not the exact continuation)."""
        run = self.run
        if run.world_size > 1 or run.train_iter == 0 or run.train_iter == self._saved_iter:
            return
        try:
            self._save(episodes=False)
            log.warning("the run failed after train iteration %d; saved it: continue with --resume auto",
                        run.train_iter)
        except Exception as exc:  # noqa: BLE001 - the original error is the one to report
            log.warning("the run failed and its last iterations could not be saved either: %s", exc)

    def _state(self, arrays: bool = True, episodes: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
        """(plain state, arrays); ``arrays=False`` (the ``best`` slot): none, and no meta that
        would need them; ``episodes=False``: not the collector's work in progress."""
        state: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "collector": self.collector.state_dict(),
            "epoch": self.epoch,
            "progress": None if self._progress is None else list(self._progress),
            "pending": {k: list(v) for k, v in self._pending.items() if v},
            "sample_rng": generator_state(self.sample_rng),
            "timer": dict(self.timer.total),
            "world_size": self.run.world_size,
            # the return that reached the stop value: a resume of a solved run has nothing to do
            **({"solved": self._solved} if self._solved is not None else {}),
            **self.extra_state(),
        }
        if self.evaluator is not None:
            state["evaluator"] = self.evaluator.state_dict()
        return state, self._array_state(state, episodes) if arrays else {}

    def _array_state(self, into: dict[str, Any], episodes: bool = True) -> dict[str, Any]:
        """With ``run.save_buffer``: put the buffer's and (with ``episodes``) the collector's
        work-in-progress meta into ``into`` and return their arrays under ``buffer/`` and
        ``collector/``; otherwise no arrays."""
        if not self.run.cfg.save_buffer:
            return {}
        meta, buf_arrays = self.buffer.state_dict()
        into["buffer_meta"] = meta
        out = {f"buffer/{k}": v for k, v in buf_arrays.items()}
        if episodes and isinstance(self.collector, ResumableCollector):
            meta, col_arrays = self.collector.episode_state()
            into["collector_episodes"] = meta
            out.update({f"collector/{k}": v for k, v in col_arrays.items()})
        return out

    def _load_arrays(self, state: dict[str, Any], arrays: dict[str, Any], prefix: str = "") -> None:
        """The buffer and the collector's episodes that :meth:`_array_state` saved into ``state``
        (arrays under ``prefix`` + ``buffer/`` / ``collector/``), where present."""
        def under(p: str) -> dict[str, Any]:
            return {k[len(p):]: v for k, v in arrays.items() if k.startswith(p)}

        if "buffer_meta" in state:
            self.buffer.load_state_dict(state["buffer_meta"], under(prefix + "buffer/"))
            self.buffer_restored = True
        if "collector_episodes" in state and isinstance(self.collector, ResumableCollector):
            self.collector.load_episode_state(state["collector_episodes"], under(prefix + "collector/"))
            skipped = state["collector_episodes"].get("player", {}).get("skipped")
            if skipped:
                log.warning("the checkpoint holds no running episodes (%s): the resumed run starts fresh ones, "
                            "so it is not the uninterrupted run's continuation", skipped)

    def _save(self, episodes: bool = True) -> None:
        t0 = time.perf_counter()
        run = self.run
        if run.world_size == 1:
            state, arrays = self._state(episodes=episodes)
        else:
            # Every rank takes part: ranks > 0 send their own state to rank 0, which writes it.
            others = self._send_rank_states()
            state, arrays = self._state() if run.is_main else ({}, {})
            if run.is_main:
                state["ranks"] = [plain for plain, _ in others]
                for r, (_, rank_arrays) in enumerate(others, start=1):
                    arrays.update({f"rank{r}/{k}": v for k, v in rank_arrays.items()})
        run.save_checkpoint(state, arrays)
        self._saved_iter = run.train_iter
        self.timer.add("checkpoint", time.perf_counter() - t0)

    def _rank_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """This rank's own state (plain values, numpy arrays): what differs between ranks."""
        plain: dict[str, Any] = {
            "sample_rng": generator_state(self.sample_rng),
            "collector": self.collector.state_dict(),
        }
        plain["policy_rng"] = generator_state(self.policy.rng)
        return plain, self._array_state(plain)

    def _send_rank_states(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return ranks.gather_rank_states(self.run, self._rank_state)

    def _resume(self) -> bool:
        loaded = self.run.resume_state()
        if loaded is None:
            return False
        state, arrays = loaded
        run = self.run
        saved_world = int(state.get("world_size", 1))
        if saved_world != run.world_size:
            raise ConfigError(
                f"the checkpoint {run.resume_path} was written by a run with {saved_world} rank(s); resume it "
                f"with the same world size (lzkernel launch --nproc {saved_world} ...), not {run.world_size}")
        self.policy.load_state_dict(state["policy"])
        self.collector.load_state_dict(state["collector"])
        if self.evaluator is not None and "evaluator" in state:
            self.evaluator.load_state_dict(state["evaluator"])
        self.epoch = int(state["epoch"])
        self._solved = None if state.get("solved") is None else float(state["solved"])
        # None: between epochs (also in states from before it, and without the buffer: an
        # epoch's remaining updates need the data it trained on, so a new epoch starts).
        progress = state.get("progress") if "buffer_meta" in state else None
        self._progress = None if progress is None else (int(progress[0]), int(progress[1]), bool(progress[2]))
        for k, v in state.get("pending", {}).items():
            self._pending[k] = [float(x) for x in v]
        set_generator_state(self.sample_rng, state["sample_rng"])
        for k, v in state.get("timer", {}).items():
            self.timer.total[k] = float(v)
        rank_states = state.get("ranks") or []
        own = rank_states[run.rank - 1] if 0 < run.rank <= len(rank_states) else None
        if not (own and "buffer_meta" in own):
            # Rank 0's arrays; another rank without its own (e.g. from ``best``) takes rank 0's
            # buffer only: its envs are seeded differently, so they start fresh episodes.
            shared = ("buffer_meta", "collector_episodes") if run.rank == 0 else ("buffer_meta",)
            self._load_arrays({k: v for k, v in state.items() if k in shared}, arrays)
        if run.rank > 0:
            self._load_rank_state(own, arrays)
        self.load_extra_state(state)
        return True

    def _load_rank_state(self, mine: dict[str, Any] | None, arrays: dict[str, Any]) -> None:
        """Rank r > 0 of a resumed run: its own RNGs, collector counters and buffer. A checkpoint
        without them (e.g. ``ckpt/best``) leaves rank 0's buffer and re-derives the RNG streams."""
        run = self.run
        # Global python/numpy streams include the rank (seed_globals); the checkpoint holds rank 0's.
        random.seed(run.seed("python", run.rank, "resume", run.train_iter))
        np.random.seed(run.seed("numpy", run.rank, "resume", run.train_iter))
        if mine is None:
            self.sample_rng = run.rng("sample", run.rank, "resume", run.train_iter)
            set_generator_state(self.policy.rng, generator_state(run.rng("policy", run.rank, "resume", run.train_iter)))
            return
        set_generator_state(self.sample_rng, mine["sample_rng"])
        self.collector.load_state_dict(mine["collector"])
        if "policy_rng" in mine:
            set_generator_state(self.policy.rng, mine["policy_rng"])
        self._load_arrays(mine, arrays, prefix=f"rank{run.rank}/")

