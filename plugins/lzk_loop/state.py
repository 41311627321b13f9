"""Checkpoints and resume of the loop skeleton: what a checkpoint holds and how a run continues
from one (single and multi-rank).

A checkpoint (written by rank 0 through ``run.save_checkpoint``) holds the policy's state, the
collector's and evaluator's, the epoch, the sample RNG, the phase timers, the trainer's
``extra_state()``, and, with ``run.save_buffer``, the replay buffer's arrays under ``buffer/``.
With several ranks it also holds every other rank's own state (sample and policy RNGs,
collector counters, replay buffer) under ``ranks`` / ``rank<r>/``; resume requires the same
world size.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any

import numpy as np

from lzk_loop import ranks
from lzkernel import ConfigError, generator_state, set_generator_state

log = logging.getLogger("lzkernel")


class LoopCheckpoints:
    """The checkpoint half of :class:`~lzk_loop.skeleton.LoopTrainer` (a mixin: it reads the
    trainer's ``run``, ``policy``, ``buffer``, ``collector``, ``evaluator``, ``epoch``,
    ``sample_rng`` and ``timer``)."""

    run: Any
    buffer_restored: bool = False  # a resume loaded this rank's replay buffer
    _saved_iter: int = -1  # train_iter of the newest checkpoint this process wrote

    def extra_state(self) -> dict[str, Any]:
        """Subclasses' own counters to checkpoint (plain values)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def _save_after_error(self) -> None:
        """A checkpoint of the iterations completed before an error (single process), unless the
        newest checkpoint already holds them or saving fails too (say so, keep the first error)."""
        run = self.run
        if run.world_size > 1 or run.train_iter == 0 or run.train_iter == self._saved_iter:
            return
        try:
            self._save()
            log.warning("the run failed after train iteration %d; saved it: continue with --resume auto",
                        run.train_iter)
        except Exception as exc:  # noqa: BLE001 - the original error is the one to report
            log.warning("the run failed and its last iterations could not be saved either: %s", exc)

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        state: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "collector": self.collector.state_dict(),
            "epoch": self.epoch,
            "sample_rng": generator_state(self.sample_rng),
            "timer": dict(self.timer.total),
            "world_size": self.run.world_size,
            **self.extra_state(),
        }
        if self.evaluator is not None:
            state["evaluator"] = self.evaluator.state_dict()
        return state, self._buffer_state(state)

    def _buffer_state(self, into: dict[str, Any]) -> dict[str, Any]:
        """With ``run.save_buffer``: put the buffer's meta into ``into`` and return its arrays
        under ``buffer/``; otherwise no arrays."""
        if not self.run.cfg.save_buffer:
            return {}
        meta, buf_arrays = self.buffer.state_dict()
        into["buffer_meta"] = meta
        return {f"buffer/{k}": v for k, v in buf_arrays.items()}

    def _load_buffer(self, meta: dict[str, Any], arrays: dict[str, Any], prefix: str = "buffer/") -> None:
        self.buffer.load_state_dict(meta, {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)})
        self.buffer_restored = True

    def _save(self) -> None:
        t0 = time.perf_counter()
        run = self.run
        if run.world_size == 1:
            state, arrays = self._state()
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
        return plain, self._buffer_state(plain)

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
                f"with the same world size (torchrun --nproc_per_node={saved_world}), not {run.world_size}")
        self.policy.load_state_dict(state["policy"])
        self.collector.load_state_dict(state["collector"])
        if self.evaluator is not None and "evaluator" in state:
            self.evaluator.load_state_dict(state["evaluator"])
        self.epoch = int(state["epoch"])
        set_generator_state(self.sample_rng, state["sample_rng"])
        for k, v in state.get("timer", {}).items():
            self.timer.total[k] = float(v)
        rank_states = state.get("ranks") or []
        own = rank_states[run.rank - 1] if 0 < run.rank <= len(rank_states) else None
        if "buffer_meta" in state and not (own and "buffer_meta" in own):
            self._load_buffer(state["buffer_meta"], arrays)
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
        if "buffer_meta" in mine:
            self._load_buffer(mine["buffer_meta"], arrays, prefix=f"rank{run.rank}/buffer/")

