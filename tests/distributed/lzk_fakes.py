"""Test-only plugin: tiny fake env/policy/buffer/collector/evaluator for running the *real* loop
skeleton (and the real ReZero trainer, replay_ratio schedule, run context and comm backend)
with several ranks as threads (``comm.name=threads``).

* the collector of rank r collects ``base + r * extra`` transitions per collect, so ranks
  disagree on every local count;
* the policy owns a real torch model with BatchNorm whose initial weights depend on the rank
  (the trainer must broadcast rank 0's), and its ``learn`` averages real gradients through
  ``run.comm.average_gradients`` on a rank-specific batch;
* the evaluator (rank 0) reports ``eval/return_mean = train_iter``;
* ``signal_rank``/``signal_epoch`` set ``run.stop_requested`` (and ``stop_signal``) on one rank only;
  ``evaluator.signal_at`` makes that evaluation receive a "signal" part-way and give up
  (``StopRequested``), as the real evaluators do;
  ``fault_rank``/``fault_at_learn`` make one rank's ``learn`` raise;
* the ``rank_local`` update schedule counts this rank's transitions only (ranks disagree).

Every fake records what it did in ``log`` so a test can compare ranks.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from lzkernel import Component, ObservationValues, ReanalysableBuffer, StopRequested, TargetSpec, hookimpl, option


@dataclass
class FakeEnvConfig:
    obs_dim: int = option(3, doc="Observation size.", min=1)


@dataclass
class FakePolicyConfig:
    batch_size: int = option(8, doc="Batch size.", min=1)
    unroll_steps: int = option(1, doc="K.", min=0)
    td_steps: int = option(1, doc="n.", min=1)
    discount: float = option(0.99, doc="Discount.")
    target_update_freq: int = option(2, doc="Target update period.", min=1)
    lr: float = option(0.1, doc="SGD step size.")
    fault_rank: int = option(-1, doc="Rank whose learn raises (-1: none).")
    fault_at_learn: int = option(3, doc="Learn call that raises.", min=1)


@dataclass
class FakeCollectorConfig:
    base: int = option(5, doc="Transitions rank 0 collects per collect.", min=0)
    extra: int = option(4, doc="Rank r collects base + r * extra.", min=0)
    signal_rank: int = option(-1, doc="Rank that receives a 'signal' (-1: none).")
    signal_epoch: int = option(2, doc="Collect call after which it is received.", min=0)


@dataclass
class FakeEvaluatorConfig:
    every_train_iters: int = option(4, doc="Evaluate every this many train iterations.", min=1)
    stop_value: float = option(1e9, doc="Stop when train_iter (the fake return) reaches this.")
    signal_at: int = option(-1, doc="Evaluation (1-based call) during which a signal arrives (-1: none).")


def _no_envs(num_envs: int, seed: int) -> Any:
    raise NotImplementedError("the fake collector steps no env")


def _env(cfg: FakeEnvConfig, run: Any) -> Any:
    return SimpleNamespace(id="fake", obs_shape=(cfg.obs_dim,), num_actions=2, two_player=False,
                           truncation_as_terminal=False, make_vector=_no_envs)


class FakePolicy:
    def __init__(self, cfg: FakePolicyConfig, run: Any, env_spec: Any) -> None:
        import torch
        from torch import nn

        self.cfg, self.run = cfg, run
        gen = torch.Generator().manual_seed(1000 + run.rank)  # rank-dependent on purpose
        self.model = nn.Sequential(nn.Linear(env_spec.obs_shape[0], 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        self.target_model = nn.Sequential(nn.Linear(env_spec.obs_shape[0], 4), nn.BatchNorm1d(4), nn.ReLU(),
                                          nn.Linear(4, 1)).eval()
        self.target_model.load_state_dict(self.model.state_dict())
        self.target_version = 0
        self.learn_calls = 0
        self.rng = np.random.default_rng(run.seed("policy", run.rank))
        self.average = run.comm.average_gradients if run.world_size > 1 else None
        self.weights_changed = 0
        self._target_updated = False

    @property
    def target_spec(self) -> TargetSpec:
        c = self.cfg
        return TargetSpec(unroll_steps=c.unroll_steps, td_steps=c.td_steps, discount=c.discount, frame_stack=1,
                          batch_size=c.batch_size)

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        return 1.0, 0.0

    def act(self, *args: Any, **kwargs: Any) -> Any:  # the fake collector and evaluator never act
        raise NotImplementedError

    def reset_envs(self, env_ids: Any, mode: str) -> None:
        pass

    def replicated_tensors(self) -> list[Any]:
        return [t for m in (self.model, self.target_model) for t in (*m.parameters(), *m.buffers())]

    def updated_buffers(self) -> list[Any]:
        mods = (self.model, self.target_model) if self._target_updated else (self.model,)
        return [b for m in mods for b in m.buffers() if b.is_floating_point()]

    def mark_weights_changed(self) -> None:
        self.weights_changed += 1

    def value_fn(self, obs: Any) -> Any:
        return np.zeros(len(obs), dtype=np.float32)

    def reanalyze_fn(self, *args: Any) -> Any:
        raise AssertionError("the fake buffer does not call reanalyze_fn")

    def learn(self, batch: Any) -> tuple[dict[str, float], Any]:
        import torch

        self.learn_calls += 1
        if self.run.rank == self.cfg.fault_rank and self.learn_calls == self.cfg.fault_at_learn:
            raise ValueError(f"fake learn failed on call {self.learn_calls}")
        x = torch.from_numpy(self.rng.normal(size=(self.cfg.batch_size, 3)).astype(np.float32))
        self.model.train()
        loss = self.model(x).pow(2).mean()
        for p in self.model.parameters():
            p.grad = None
        loss.backward()
        if self.average is not None:
            self.average([p for p in self.model.parameters()])
        with torch.no_grad():
            for p in self.model.parameters():
                p -= self.cfg.lr * p.grad
        self._target_updated = self.learn_calls % self.cfg.target_update_freq == 0
        if self._target_updated:
            self.target_model.load_state_dict(self.model.state_dict())
            self.target_version += 1
        return {"train/loss": float(loss.detach())}, np.ones(len(batch.indices), dtype=np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "target_model": self.target_model.state_dict(),
                "learn_calls": self.learn_calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target_model.load_state_dict(state["target_model"])
        self.learn_calls = int(state["learn_calls"])


class FakeBuffer:
    capacity = 10**9

    def __init__(self) -> None:
        self.num_transitions = 0
        self.reanalyses = 0
        self.samples = 0

    def push(self, trajectories: list[Any]) -> int:
        n = sum(len(t) for t in trajectories)
        self.num_transitions += n
        return n

    def sample(self, batch_size: int, rng: np.random.Generator, source: Any) -> Any:
        self.samples += 1
        return SimpleNamespace(indices=rng.integers(0, self.num_transitions, size=batch_size))

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        pass

    def reanalyze(self, source: Any, rng: Any, *, reuse: bool = True) -> dict[str, float]:
        self.reanalyses += 1
        return {"roots": float(self.num_transitions)}

    def state_dict(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"n": self.num_transitions, "reanalyses": self.reanalyses}, {"fill": np.arange(self.num_transitions)}

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, Any]) -> None:
        self.num_transitions = int(meta["n"])
        self.reanalyses = int(meta["reanalyses"])
        assert len(arrays["fill"]) == self.num_transitions


class FakeCollector:
    def __init__(self, cfg: FakeCollectorConfig, run: Any) -> None:
        self.cfg, self.run = cfg, run
        self.calls = 0
        self.total = 0

    def collect(self, policy: Any, *, temperature: float = 1.0, epsilon: float = 0.0,
                random_policy: bool = False, n_episode: int | None = None) -> tuple[list[Any], dict[str, float]]:
        self.calls += 1
        n = self.cfg.base + self.run.rank * self.cfg.extra
        self.total += n
        if self.run.rank == self.cfg.signal_rank and self.calls == self.cfg.signal_epoch:
            # as the SIGTERM handler would, on this rank only
            self.run.stop_requested, self.run.stop_signal = True, signal.SIGTERM
        return [range(n)], {"collect/transitions": float(n)}

    def state_dict(self) -> dict[str, Any]:
        return {"total_env_steps": self.total, "calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total, self.calls = int(state["total_env_steps"]), int(state["calls"])

    def close(self) -> None:
        pass


class FakeEvaluator:
    def __init__(self, cfg: FakeEvaluatorConfig, run: Any) -> None:
        self.cfg, self.run = cfg, run
        self.last = -1
        self.unrecorded = -1
        self.best = -float("inf")
        self.calls = 0  # evaluate calls, the abandoned one included
        self.evaluated: list[int] = []  # train_iter of each completed evaluation

    def should_eval(self, train_iter: int) -> bool:
        if train_iter - self.last >= self.cfg.every_train_iters or self.last < 0:
            self.unrecorded, self.last = self.last, train_iter
            return True
        return False

    def evaluate(self, policy: Any) -> dict[str, float]:
        self.calls += 1
        if self.calls == self.cfg.signal_at:
            self.run.stop_requested, self.run.stop_signal = True, signal.SIGTERM  # as the handler would, part-way
            self.last = self.unrecorded
            raise StopRequested("stop requested during a fake evaluation")
        self.evaluated.append(self.run.train_iter)
        return {"eval/return_mean": float(self.run.train_iter)}

    def is_best(self, mean: float) -> bool:
        if mean > self.best:
            self.best = mean
            return True
        return False

    def reached(self, mean: float) -> bool:
        return mean >= self.cfg.stop_value

    def state_dict(self) -> dict[str, Any]:
        return {"last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last = int(state["last"])

    def close(self) -> None:
        pass


@dataclass
class RankLocalScheduleConfig:
    ratio: float = option(0.25, doc="Updates per transition collected by this rank alone.", min=0.0)
    min_updates: int = option(1, doc="Lower bound on the updates after a collect.", min=0)


class RankLocalSchedule:
    """The bug RELIABILITY.md D5 describes (LightZero's replay ratio off CUDA): ``int(ratio * n)``
    of this rank's own count, not summed over ranks, so a rank that collected more data runs more
    updates."""

    def __init__(self, cfg: RankLocalScheduleConfig) -> None:
        self.cfg = cfg

    def updates(self, collected_transitions: int) -> int:
        return max(self.cfg.min_updates, int(collected_transitions * self.cfg.ratio))


@hookimpl
def lzkernel_register_update_schedules() -> list[Component]:
    return [Component("rank_local", factory=lambda cfg, run: RankLocalSchedule(cfg), config=RankLocalScheduleConfig,
                      doc="test")]


@hookimpl
def lzkernel_register_envs() -> list[Component]:
    return [Component("fake", factory=_env, config=FakeEnvConfig, doc="test")]


@hookimpl
def lzkernel_register_policies() -> list[Component]:
    return [Component("fake", factory=lambda cfg, run, env_spec: FakePolicy(cfg, run, env_spec),
                      config=FakePolicyConfig, provides=(ObservationValues,), doc="test")]


@hookimpl
def lzkernel_register_buffers() -> list[Component]:
    return [Component("fake", factory=lambda cfg, run, **kw: FakeBuffer(), config=None,
                      provides=(ReanalysableBuffer,), doc="test")]


@hookimpl
def lzkernel_register_collectors() -> list[Component]:
    return [Component("fake", factory=lambda cfg, run, **kw: FakeCollector(cfg, run), config=FakeCollectorConfig,
                      doc="test")]


@hookimpl
def lzkernel_register_evaluators() -> list[Component]:
    return [Component("fake", factory=lambda cfg, run, **kw: FakeEvaluator(cfg, run), config=FakeEvaluatorConfig,
                      doc="test", resume_safe=("stop_value",))]

