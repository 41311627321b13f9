"""A test-only lzkernel plugin (``-p lzk_fault_plugin``, ``tests/fault`` on PYTHONPATH).

Registers the trainer ``fault_loop``: a toy parameter updated once per iteration from one real
collective (an all-reduce that also carries the ranks' stop flags, so every rank stops
together), with checkpoints and resume through the run context, and knobs that inject faults:

* ``hang_rank`` / ``hang_at_iter`` / ``hang_s``: that rank sleeps inside ``env_step`` before
  iteration ``hang_at_iter`` (alive but stuck outside any collective, as an env that hangs), or
  after its last iteration when ``hang_at_iter`` is past ``run.max_train_iters``;
* ``raise_rank`` / ``raise_at_iter``: that rank raises ``RuntimeError`` there;
* ``sleep_s``: seconds per iteration (a run slow enough to watch).

Nothing here ships: the knobs exist only in this test module.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lzkernel import Component, hookimpl, option


@dataclass
class FaultLoopConfig:
    """Options of the ``fault_loop`` trainer."""

    lr: float = option(0.1, doc="Step size of the toy parameter.")
    sleep_s: float = option(0.0, doc="Seconds to sleep per iteration.", min=0.0)
    hang_rank: int = option(-1, doc="Rank that hangs in env_step (-1: none).")
    hang_at_iter: int = option(3, doc="Iteration before which it hangs.", min=1)
    hang_s: float = option(600.0, doc="How long it hangs.", min=0.0)
    raise_rank: int = option(-1, doc="Rank that raises (-1: none).")
    raise_at_iter: int = option(3, doc="Iteration before which it raises.", min=1)
    api_token: str = option("", doc="A credential: never written (RELIABILITY E7); its length is noted in "
                            "resolved.json as fault_loop.api_token_length, to show the trainer got the real value.")


class FaultLoop:
    """One all-reduce per iteration; rank 0 checkpoints every ``run.checkpoint_every``, with
    an array ``trace`` of one entry per iteration (so a checkpoint has ``arrays.npz``)."""

    def __init__(self, cfg: FaultLoopConfig, run: Any) -> None:
        import torch

        self.cfg, self.run = cfg, run
        self.param = torch.zeros(1)
        if cfg.api_token:
            run.note("fault_loop.api_token_length", len(cfg.api_token))

    def state_dict(self) -> dict[str, Any]:
        return {"param": self.param.clone()}

    def arrays(self) -> dict[str, Any]:
        import numpy as np

        return {"trace": np.arange(self.run.train_iter, dtype=np.int64)}

    def env_step(self) -> None:
        """Where the injected hang sleeps (named by the heartbeat as the stuck place)."""
        time.sleep(self.cfg.hang_s)

    def train(self) -> None:
        import torch

        run, cfg = self.run, self.cfg
        resumed = run.resume_state()
        if resumed is not None:
            self.param = resumed[0]["param"]
            assert len(resumed[1]["trace"]) == run.train_iter, "arrays do not match the counters"
        while run.train_iter < run.cfg.max_train_iters and run.env_steps < run.cfg.max_env_steps:
            it = run.train_iter + 1
            if run.rank == cfg.hang_rank and it == cfg.hang_at_iter:
                self.env_step()
            if run.rank == cfg.raise_rank and it == cfg.raise_at_iter:
                raise RuntimeError(f"injected fault on rank {run.rank} at iteration {it}")
            t = torch.tensor([1.0, float(run.stop_requested)])
            run.comm.all_reduce_sum(t)
            self.param += cfg.lr * t[0]
            run.train_iter = it
            run.env_steps += 10 * run.world_size
            run.emit_collect({"collect/env_steps": 10.0 * run.world_size})
            if it % run.cfg.log_every == 0:
                run.emit_train({"train/param": float(self.param)})
            if run.cfg.checkpoint_every and it % run.cfg.checkpoint_every == 0:
                run.save_checkpoint(self.state_dict(), self.arrays())
            if t[1] > 0:
                break
            if cfg.sleep_s:
                time.sleep(cfg.sleep_s)
        if run.rank == cfg.hang_rank and cfg.hang_at_iter > run.cfg.max_train_iters:
            self.env_step()  # after the last collective: the other ranks finish cleanly
        run.save_checkpoint(self.state_dict(), self.arrays())


@hookimpl
def lzkernel_register_trainers() -> list[Component]:
    return [Component("fault_loop", factory=FaultLoop, config=FaultLoopConfig,
                      doc="Test only: one all-reduce per iteration, with injected hangs and faults.",
                      resume_safe=("sleep_s", "hang_rank", "hang_at_iter", "hang_s", "raise_rank", "raise_at_iter"))]
