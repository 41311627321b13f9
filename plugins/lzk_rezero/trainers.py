"""ReZero and MuZero trainers on the shared loop skeleton.

ReZero (SPEC §1.1, §3) = MuZero + periodic reanalysis of the whole replay buffer, walked
backwards so that each search can reuse the searched value of the successor state
(``reuse_search``), optionally with cheap pure-policy collection
(``policy.collect_with_pure_policy``). Plain MuZero may reanalyse a fraction of every batch
(``reanalyze_ratio``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lzk_loop import LoopConfig, LoopTrainer, ReanalysingTrainer
from lzkernel import ObservationValues, ReanalysableBuffer, option


@dataclass
class ReZeroConfig(LoopConfig):
    """Options of the ``rezero`` trainer."""

    buffer_reanalyze_freq: float = option(
        1.0, doc="f >= 1: reanalyse the whole buffer before every update i of an epoch of U updates "
                 "with i % max(1, int(U // f)) == 0 (LightZero's interval: about f times per epoch, "
                 "e.g. 5 times for f = 4, U = 10); f < 1: once every round(1/f) epochs.",
        min=0.0, min_exclusive=True)
    reuse_search: bool = option(True, doc="Backward-view value reuse inside the reanalysis search.")
    reanalyze_min_transitions: int = option(
        2000, doc="Reanalyse only once the buffer holds more than this many transitions.", min=0)


@dataclass
class MuZeroTrainerConfig(LoopConfig):
    """Options of the plain ``muzero`` trainer."""

    reanalyze_ratio: float = option(
        0.0, doc="Fraction of each batch whose policy targets are recomputed by a fresh search "
                 "with the target network (0: off, LightZero's CartPole default).", min=0.0, max=1.0)


class ReZeroTrainer(ReanalysingTrainer):
    """The ReZero loop: the MuZero loop plus scheduled whole-buffer reanalysis."""

    cfg: ReZeroConfig

    buffer: ReanalysableBuffer  # the component's declared need, checked with the config

    def reanalyze_buffer(self) -> dict[str, Any]:
        return self.buffer.reanalyze(self.policy, self.sample_rng, reuse=self.cfg.reuse_search)


class MuZeroTrainer(LoopTrainer):
    """Plain MuZero: optional per-batch reanalysis of policy targets."""

    cfg: MuZeroTrainerConfig
    policy: Any  # a LearningPolicy that provides ObservationValues (the component's declared need)

    def prepare_batch(self, batch: Any) -> Any:
        n = int(len(batch.indices) * self.cfg.reanalyze_ratio)
        if n == 0:
            return batch
        t0 = time.perf_counter()
        k1 = batch.obs.shape[1]  # K + 1 roots per sample
        obs = batch.obs[:n].reshape(n * k1, *batch.obs.shape[2:])
        legal = batch.legal[:n].reshape(n * k1, -1)
        to_play = batch.to_play[:n].reshape(n * k1)
        source: ObservationValues = self.policy
        visits, _ = source.reanalyze_fn(obs, legal, to_play, np.full(n * k1, -1, dtype=np.int64), None)
        fresh = visits.reshape(n, k1, -1) * batch.mask[:n, :, None]
        batch.target_policy[:n] = fresh
        self.timer.add("reanalyze", time.perf_counter() - t0)
        return batch
