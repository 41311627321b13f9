"""The ``alphazero`` trainer (SPEC §5.3) on the shared loop skeleton (``lzk_loop``).

One epoch, as every lzkernel trainer: evaluate when due → collect whole games (self-play with
``collector: episode``, or against a bot with ``collector: versus``) → updates from the schedule
→ push into the ``outcome`` buffer → train → checkpoint → stop on budget, ``stop_value`` or a
signal. There is no reanalysis and no target network; everything else (checkpoints, exact
resume, metrics, progress, update schedules, comm backends, torchrun) is the loop's.
"""
from __future__ import annotations

from dataclasses import dataclass

from lzk_loop import LoopConfig, LoopTrainer


@dataclass
class AlphaZeroTrainerConfig(LoopConfig):
    """Options of the ``alphazero`` trainer (those every loop trainer has)."""


class AlphaZeroTrainer(LoopTrainer):
    """The AlphaZero loop: the shared skeleton as it is."""

    cfg: AlphaZeroTrainerConfig
