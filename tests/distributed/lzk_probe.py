"""A test-only lzkernel plugin (loaded with ``-p lzk_probe``, ``tests/distributed`` on PYTHONPATH).

Registers the trainers ``rezero_probe`` and ``unizero_probe``: the real ReZero / UniZero segment
trainers plus

* ``dump_dir``: at the end of ``train()`` every rank writes ``rank<R>.pt`` there: the online and
  target parameters and buffers, counters, ``run.dir`` and the comm time, so a test can compare
  ranks bit for bit;
* ``fault_rank`` / ``fault_at_iter``: rank ``fault_rank`` raises ``RuntimeError("injected
  fault ...")`` when it is about to run update number ``fault_at_iter`` (0: before the first
  collective of ``train()``).

Nothing here ships: the fault knob exists only in this test module.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lzk_rezero.trainers import ReZeroConfig, ReZeroTrainer
from lzk_unizero.trainer import UniZeroSegmentConfig, UniZeroSegmentTrainer
from lzkernel import Component, hookimpl, option


@dataclass
class _ProbeOptions:
    dump_dir: str = option("", doc="Write rank<R>.pt with the final weights here ('' = off).")
    fault_rank: int = option(-1, doc="Rank that raises (-1: none).")
    fault_at_iter: int = option(0, doc="Raise before this update (0: at the start of train()).", min=0)


@dataclass
class ProbeConfig(ReZeroConfig, _ProbeOptions):
    pass


@dataclass
class UniZeroProbeConfig(UniZeroSegmentConfig, _ProbeOptions):
    pass


class _Probe:
    """The probe behaviour, mixed into a real trainer class."""

    cfg: Any

    def _fault(self, where: str) -> None:
        raise RuntimeError(f"injected fault on rank {self.run.rank} {where}")

    def train(self) -> None:
        if self.cfg.fault_at_iter == 0 and self.run.rank == self.cfg.fault_rank:
            self._fault("at the start of train()")
        super().train()
        self._dump()

    def prepare_batch(self, batch: Any) -> Any:
        if (self.run.rank == self.cfg.fault_rank and self.cfg.fault_at_iter
                and self.run.train_iter + 1 >= self.cfg.fault_at_iter):
            self._fault(f"before update {self.run.train_iter + 1}")
        return super().prepare_batch(batch)

    def _dump(self) -> None:
        if not self.cfg.dump_dir:
            return
        import torch

        run, policy = self.run, self.policy
        out = {
            "rank": run.rank,
            "world_size": run.world_size,
            "run_dir": str(run.dir) if run.dir is not None else None,
            "train_iter": run.train_iter,
            "env_steps": run.env_steps,
            "epoch": self.epoch,
            "learner_steps": int(policy.learner_steps),
            "reanalyses": int(getattr(self, "reanalyses", 0)),
            "collector_env_steps": int(self.collector.state_dict()["total_env_steps"]),
            # Steps taken but still in unfinished pieces (segment collector): not yet counted.
            "collector_pending": int(getattr(self.collector, "pending_transitions", 0)),
            "buffer_transitions": int(self.buffer.num_transitions),
            "comm_seconds": float(getattr(run.comm, "seconds", 0.0)),
            "params": {k: v.detach().cpu().clone() for k, v in policy.model.named_parameters()},
            "buffers": {k: v.detach().cpu().clone() for k, v in policy.model.named_buffers()},
            "target": {k: v.detach().cpu().clone() for k, v in policy.target_model.state_dict().items()},
        }
        path = Path(self.cfg.dump_dir)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(out, path / f"rank{run.rank}.pt")


class ProbeTrainer(_Probe, ReZeroTrainer):
    cfg: ProbeConfig


class UniZeroProbeTrainer(_Probe, UniZeroSegmentTrainer):
    cfg: UniZeroProbeConfig


@hookimpl
def lzkernel_register_trainers() -> list[Component]:
    return [Component("rezero_probe", factory=ProbeTrainer, config=ProbeConfig,
                      doc="Test only: ReZero plus per-rank weight dumps and fault injection."),
            Component("unizero_probe", factory=UniZeroProbeTrainer, config=UniZeroProbeConfig,
                      doc="Test only: UniZero segment trainer plus per-rank weight dumps and fault injection.")]
