"""The ``unizero_segment`` trainer (SPEC §1.2) on the shared loop skeleton.

One epoch, as every lzkernel trainer (``lzk_loop``): evaluate when due → collect segments
(``collector: segment``) → updates from the schedule (``replay_ratio``) → push/trim →
buffer reanalysis on the ``buffer_reanalyze_freq`` schedule (``buffer: unizero``) → train once
enough data is stored → clear the policy's caches → checkpoint (the newest ``run.keep_last``
plus ``best``) → stop on budget, ``stop_value`` or a signal.

Differences from LightZero's ``train_unizero_segment`` (also in ``docs/algorithms/unizero.md``):

* a resumed run restores the replay buffer when the checkpoint holds it (``run.save_buffer``);
  only when it does not, training waits for ``resume_train_start_transitions`` fresh
  transitions (LightZero's ``resume_buffer_min_transitions``, its only option);
* the epoch counter, the evaluator's best return and last-evaluation iteration and the collector
  counters are restored on resume (LightZero restarts them);
* an epoch without enough data still counts (LightZero ``continue``s before its epoch counter).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzk_loop import LoopConfig, ReanalysingTrainer
from lzkernel import ReanalysableBuffer, option


@dataclass
class UniZeroSegmentConfig(LoopConfig):
    """Options of the ``unizero_segment`` trainer."""

    buffer_reanalyze_freq: float = option(
        0.0, doc="Buffer reanalysis (SPEC §4.5): f >= 1: before every update i of an epoch of U "
                 "updates with i % max(1, int(U // f)) == 0 (LightZero's interval); "
                 "0 < f < 1: once every round(1/f) epochs; 0: never. LightZero has no default; its "
                 "CartPole config does not reanalyse.", min=0.0)
    reanalyze_min_transitions: int = option(
        0, doc="Reanalyse only once the buffer holds more than this many transitions.", min=0)
    resume_train_start_transitions: int = option(
        0, doc="After a resume from a checkpoint without the replay buffer, train only once this many "
               "transitions are stored again (LightZero's resume_buffer_min_transitions).", min=0)


class UniZeroSegmentTrainer(ReanalysingTrainer):
    """UniZero with segment collection and buffer reanalysis (see the module docstring)."""

    cfg: UniZeroSegmentConfig

    policy: Any  # a LearningPolicy with SequenceValues and SearchCaches (the component's declared needs)
    buffer: ReanalysableBuffer

    def reanalyze_buffer(self) -> dict[str, Any]:
        return self.buffer.reanalyze(self.policy, self.sample_rng)

    def train_start_transitions(self) -> int:
        start = super().train_start_transitions()
        if self.resumed and not self.buffer_restored:
            start = max(start, self.cfg.resume_train_start_transitions)
        return start

    def after_epoch(self) -> None:
        # The weights changed: nothing built with the old ones may serve the next search.
        self.policy.clear_caches()
