"""Scheduled buffer reanalysis, shared by the trainers that refresh stored search targets.

``buffer_reanalyze_freq`` = f (SPEC §1.1, §1.2):

* f >= 1: a reanalysis before updates 0, I, 2I, … of the epoch, I = max(1, int(updates // f)):
  LightZero's interval (``update_per_collect // buffer_reanalyze_freq``), so about f per epoch
  (5 for f = 4 and 10 updates; 2 for f = 1.5 and 100); LightZero divides by zero when updates < f;
* 0 < f < 1: one reanalysis before the epoch's updates, every ``round(1/f)`` epochs
  (LightZero's ``1 // f`` floors 1 // 0.1 to 9);
* f <= 0 (where a trainer allows it): never.

Whether the buffer is big enough is rank 0's decision, broadcast (:meth:`LoopTrainer.agree`), so
every rank reanalyses together. What a reanalysis does is the subclass's :meth:`reanalyze_buffer`.
"""
from __future__ import annotations

import time
from typing import Any

from lzk_loop.skeleton import LoopTrainer


class ReanalysingTrainer(LoopTrainer):
    """:class:`LoopTrainer` plus buffer reanalysis on the ``buffer_reanalyze_freq`` schedule.

    Subclasses' configs define ``buffer_reanalyze_freq`` and ``reanalyze_min_transitions``;
    subclasses implement :meth:`reanalyze_buffer`.
    """

    reanalyses: int = 0

    def reanalyze_buffer(self) -> dict[str, Any]:
        """Run one reanalysis of the buffer; return its stats (numbers are logged)."""
        raise NotImplementedError

    def before_train(self, updates: int) -> None:
        f = float(self.cfg.buffer_reanalyze_freq)
        if 0.0 < f < 1.0 and self.epoch % max(1, round(1.0 / f)) == 0:
            self._reanalyze()

    def before_update(self, i: int, updates: int) -> None:
        f = float(self.cfg.buffer_reanalyze_freq)
        if f >= 1.0 and i % max(1, int(updates // f)) == 0:
            self._reanalyze()

    def _reanalyze(self) -> None:
        if not self.agree(self.buffer.num_transitions > self.cfg.reanalyze_min_transitions):
            return
        t0 = time.perf_counter()
        stats = self.reanalyze_buffer()
        seconds = time.perf_counter() - t0
        self.timer.add("reanalyze", seconds)
        self.reanalyses = self.reanalyses + 1
        for k, v in (stats or {}).items():
            if isinstance(v, (int, float)):
                self._pending[k if "/" in k else f"reanalyze/{k}"].append(float(v))
        self._pending["reanalyze/seconds"].append(seconds)

    def extra_state(self) -> dict[str, Any]:
        return {"reanalyses": self.reanalyses}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.reanalyses = int(state.get("reanalyses", 0))
