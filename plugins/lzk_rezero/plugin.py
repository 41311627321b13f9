"""Entry point of lzk_rezero: registers the ``rezero`` and ``muzero`` trainers."""
from __future__ import annotations

from typing import Any

from lzkernel import Component, ObservationValues, ReanalysableBuffer, hookimpl
from lzk_loop import LOOP_RESUME_SAFE, loop_check

from lzk_rezero.trainers import MuZeroTrainer, MuZeroTrainerConfig, ReZeroConfig, ReZeroTrainer


def _make_rezero(cfg: ReZeroConfig, run: Any) -> ReZeroTrainer:
    return ReZeroTrainer(cfg, run)


def _make_muzero(cfg: MuZeroTrainerConfig, run: Any) -> MuZeroTrainer:
    return MuZeroTrainer(cfg, run)


@hookimpl
def lzkernel_register_trainers() -> list[Component]:
    return [
        Component("rezero", factory=_make_rezero, config=ReZeroConfig, check=loop_check, resume_safe=LOOP_RESUME_SAFE,
                  needs={"policy": (ObservationValues,), "buffer": (ReanalysableBuffer,)},
                  doc="ReZero: MuZero with whole-buffer backward-view reanalysis (SPEC §1.1, §3)."),
        Component("muzero", factory=_make_muzero, config=MuZeroTrainerConfig, check=loop_check,
                  resume_safe=LOOP_RESUME_SAFE,
                  needs={"policy": (ObservationValues,)},
                  doc="Plain MuZero with optional per-batch reanalysis."),
    ]
