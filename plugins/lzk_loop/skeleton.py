"""The shared trainer loop (SPEC §1.1/§1.2 reorganised), written once.

One epoch::

    evaluate (when due, rank 0; the stop decision is broadcast)
    collect            (every rank, its own envs)
    schedule updates   (identical on every rank: counts are summed through the comm backend)
    push + trim        (the buffer enforces its capacity)
    before_train()     (hook: epoch-level reanalysis)
    for i in range(updates):
        before_update(i)  (hook: in-loop reanalysis)
        sample → learn → priorities;  log / checkpoint when due
    after_epoch()      (hook: e.g. clear caches built with the old weights)
    stop on budget, stop_value or a signal (decided once, broadcast)

Subclasses override the hooks; everything else (counters, metrics, checkpoints, resume, the
stop protocol) lives here so every algorithm behaves the same way.

With several ranks (``run.world_size > 1``, see ``docs/distributed.md``) every decision that
changes control flow is taken collectively, so all ranks run the same collectives: evaluation
and stop-after-eval (rank 0 decides, broadcast), "enough data to train" (all ranks must be
ready), stop on budget or signal (any rank), reanalyse now (:meth:`LoopTrainer.agree`). Rank
0's initial weights are broadcast once; after every update the floating buffers of the
policy's ``model`` (BatchNorm running statistics) are averaged over ranks, so parameters *and*
buffers stay bit-identical. Checkpoints (written by rank 0) carry every rank's own state
(sample RNG, policy RNG, collector counters, replay buffer), and resume requires the same
world size.
"""
from __future__ import annotations

import os
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from lzk_loop import ranks
from lzkernel import ConfigError, generator_state, option, set_generator_state


@dataclass
class LoopConfig:
    """Options every loop trainer has."""

    random_collect_episodes: int = option(
        0, doc="Episodes collected with a uniformly random policy before training (0: none).", min=0)
    eval_at_start: bool = option(True, doc="Evaluate once before the first collection.")
    train_start_transitions: int = option(
        0, doc="Train only once the buffer holds more than max(this, batch_size) transitions.", min=0)


def rss_mb() -> float:
    """This process's current resident set size in MiB (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return peak / (2**20 if sys.platform == "darwin" else 2**10)


class _Timer:
    """Cumulative seconds per phase, reported as ``time/<phase>_s``."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)

    def add(self, phase: str, seconds: float) -> None:
        self.total[phase] += seconds

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}_s": round(v, 3) for k, v in self.total.items()}


class LoopTrainer:
    """Evaluate → collect → schedule → push → reanalyze → train → checkpoint → stop."""

    def __init__(self, cfg: LoopConfig, run: Any) -> None:
        self.cfg = cfg
        self.run = run
        self.pcfg = run.section("policy")
        self.env_spec = run.build("env")
        self.policy = run.build("policy", env_spec=self.env_spec)
        if run.world_size > 1:
            self._broadcast_initial_weights()
        frame_stack = int(getattr(self.pcfg, "frame_stack", 1))
        self.buffer = run.build(
            "buffer",
            unroll_steps=self.pcfg.unroll_steps,
            td_steps=self.pcfg.td_steps,
            discount=self.pcfg.discount,
            frame_stack=frame_stack,
            obs_shape=tuple(self.env_spec.obs_shape),
            num_actions=int(self.env_spec.num_actions),
        )
        self.collector = run.build("collector", env_spec=self.env_spec, frame_stack=frame_stack)
        # Only rank 0 evaluates; the other ranks receive its stop decision.
        self.evaluator = run.build("evaluator", env_spec=self.env_spec, frame_stack=frame_stack) if run.is_main else None
        self.schedule = run.build("update_schedule")
        self.sample_rng = run.rng("sample", run.rank)
        self.epoch = 0
        self.timer = _Timer()
        self._pending: dict[str, list[float]] = defaultdict(list)
        self.last_eval: float | None = None
        self.resumed = False
        self.buffer_restored = False  # a resume loaded this rank's replay buffer
        self._stop_now = False

    # -- hooks for subclasses ----------------------------------------------------------------

    def before_train(self, updates: int) -> None:
        """Called once per epoch after the push, before the update loop."""

    def before_update(self, i: int, updates: int) -> None:
        """Called before update ``i`` of ``updates`` in this epoch."""

    def after_epoch(self) -> None:
        """Called once per epoch after its updates (e.g. to drop caches built with old weights)."""

    def train_start_transitions(self) -> int:
        """Train only once every rank's buffer holds more than max(this, batch_size) transitions."""
        return int(self.cfg.train_start_transitions)

    def prepare_batch(self, batch: Any) -> Any:
        """Last chance to change a sampled batch (e.g. per-batch reanalysis)."""
        return batch

    def extra_state(self) -> dict[str, Any]:
        return {}

    def agree(self, local: bool) -> bool:
        """A control-flow decision taken once: rank 0's ``local`` value, broadcast to every rank
        (e.g. "reanalyse now", which depends on this rank's buffer size)."""
        run = getattr(self, "run", None)  # unit tests may drive the hooks without a run
        if run is None or run.world_size == 1:
            return bool(local)
        return bool(run.comm.broadcast_object(bool(local)))

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> None:
        run = self.run
        resumed = self.resumed = self._resume()
        if not resumed and self.cfg.random_collect_episodes > 0:
            self._collect(random_policy=True, n_episode=self.cfg.random_collect_episodes)
        if self.cfg.eval_at_start and not resumed:
            self._evaluate_and_decide(force=True)
        while True:
            if self._should_eval() and self._evaluate_and_decide():
                break
            collected = self._collect()
            updates = int(self.schedule.updates(collected))
            self._timed("buffer", self._trim)
            self.before_train(updates)
            self._train_epoch(updates)
            self.after_epoch()
            self.epoch += 1
            if self._should_stop():
                break
        self._save()
        if self.evaluator is not None and self.last_eval is not None:
            run.progress(f"done: last eval {self.last_eval:.1f}")

    def _train_epoch(self, updates: int) -> None:
        run = self.run
        needed = max(int(self.pcfg.batch_size), self.train_start_transitions())
        # Train only when every rank holds enough data (decided once per epoch: the buffer size
        # does not change inside the update loop), so all ranks run the same number of updates.
        ready = self._all_ranks(self.buffer.num_transitions > needed) if updates > 0 else False
        for i in range(updates):
            self.before_update(i, updates)
            if not ready:
                break
            t0 = time.perf_counter()
            batch = self.buffer.sample(int(self.pcfg.batch_size), self.sample_rng, self.policy.value_fn)
            batch = self.prepare_batch(batch)
            t1 = time.perf_counter()
            target_version = getattr(self.policy, "target_version", None)
            metrics, priorities = self.policy.learn(batch)
            if run.world_size > 1:
                self._sync_buffers(target_version)
            t2 = time.perf_counter()
            self.buffer.update_priorities(batch.indices, priorities)
            self.timer.add("sample", t1 - t0)
            self.timer.add("learn", t2 - t1)
            run.train_iter += 1
            for k, v in metrics.items():
                self._pending[k].append(float(v))
            if run.train_iter % run.cfg.log_every == 0:
                self._emit_train()
            if run.cfg.checkpoint_every and run.train_iter % run.cfg.checkpoint_every == 0:
                self._save()
            eval_due, signalled = self._decisions()
            if signalled:  # SIGINT/SIGTERM: leave within one update, the caller saves
                self._stop_now = True
                return
            # Evaluate between updates too, so evaluations fall every N iterations exactly.
            if eval_due and self._evaluate_and_decide():
                self._stop_now = True
                return
            if run.train_iter >= run.cfg.max_train_iters:
                return

    # -- phases ------------------------------------------------------------------------------

    def _collect(self, random_policy: bool = False, n_episode: int | None = None) -> int:
        run = self.run
        t0 = time.perf_counter()
        temperature = float(self.pcfg.temperature(run.train_iter)) if hasattr(self.pcfg, "temperature") else 1.0
        epsilon = float(self.pcfg.epsilon(run.env_steps)) if hasattr(self.pcfg, "epsilon") else 0.0
        trajectories, metrics = self.collector.collect(
            self.policy, temperature=temperature, epsilon=epsilon, random_policy=random_policy,
            n_episode=n_episode)
        local = int(sum(len(t) for t in trajectories))
        t1 = time.perf_counter()
        self.buffer.push(trajectories)
        self.timer.add("collect", t1 - t0)
        self.timer.add("buffer", time.perf_counter() - t1)
        run.env_steps += self._sum_over_ranks(local)
        run.emit_collect({**metrics, "collect/temperature": temperature, "collect/epsilon": epsilon,
                          "buffer/transitions": float(self.buffer.num_transitions), "sys/rss_mb": rss_mb()})
        return local

    def _trim(self) -> None:
        trim = getattr(self.buffer, "trim", None)
        if callable(trim):
            trim()

    def _should_eval(self) -> bool:
        return self._decisions()[0]

    def _decisions(self) -> tuple[bool, bool]:
        """(evaluation due, stop signal received), decided on rank 0 and broadcast in one
        collective so that no rank can take a different branch."""
        due = bool(self.evaluator.should_eval(self.run.train_iter)) if self.evaluator is not None else False
        decided = self.run.comm.broadcast_object([due, bool(self.run.stop_requested)])
        return bool(decided[0]), bool(decided[1])

    def _evaluate_and_decide(self, force: bool = False) -> bool:
        """Evaluate on rank 0 (when ``force`` or due) and return the broadcast stop decision."""
        run = self.run
        stop = False
        if self.evaluator is not None:
            t0 = time.perf_counter()
            if force:
                self.evaluator.should_eval(run.train_iter)  # record this evaluation's iteration
            metrics = self.evaluator.evaluate(self.policy)
            self.timer.add("eval", time.perf_counter() - t0)
            mean = float(metrics["eval/return_mean"])
            self.last_eval = mean
            run.emit_eval(metrics)
            if self.evaluator.is_best(mean):
                run.save_checkpoint(self._state()[0], tag="best")
            # LightZero stops only after training started (train_iter > 0); so do we.
            stop = bool(self.evaluator.reached(mean)) and run.train_iter > 0
        return bool(run.comm.broadcast_object(stop))

    def _should_stop(self) -> bool:
        run = self.run
        local = (
            self._stop_now
            or run.env_steps >= run.cfg.max_env_steps
            or run.train_iter >= run.cfg.max_train_iters
            or run.stop_requested
        )
        # Budgets are identical on every rank; a signal may reach one rank only: stop if any rank
        # wants to (one all-reduce, the same answer everywhere).
        return self._any_rank(bool(local))

    def _emit_train(self) -> None:
        metrics = {k: float(np.mean(v)) for k, v in self._pending.items() if v}
        self._pending.clear()
        metrics.update(self.timer.metrics())
        comm_seconds = getattr(self.run.comm, "seconds", None)
        if comm_seconds is not None:
            metrics["time/comm_s"] = round(float(comm_seconds), 3)  # in collectives, this process
        metrics["train/epoch"] = float(self.epoch)
        metrics["buffer/transitions"] = float(self.buffer.num_transitions)
        self.run.emit_train(metrics)

    def _sum_over_ranks(self, value: int) -> int:
        if self.run.world_size == 1:
            return value
        import torch

        t = torch.tensor([value], dtype=torch.int64)
        self.run.comm.all_reduce_sum(t)
        return int(t.item())

    def _any_rank(self, flag: bool) -> bool:
        if self.run.world_size == 1:
            return bool(flag)
        return self._sum_over_ranks(int(bool(flag))) > 0

    def _all_ranks(self, flag: bool) -> bool:
        if self.run.world_size == 1:
            return bool(flag)
        return self._sum_over_ranks(int(not flag)) == 0

    # -- keeping ranks identical (see lzk_loop.ranks) ---------------------------------------

    def _broadcast_initial_weights(self) -> None:
        ranks.broadcast_initial_weights(self.run.comm, self.policy)

    def _sync_buffers(self, target_version_before: Any) -> None:
        ranks.sync_buffers(self.run.comm, self.run.world_size, self.policy, target_version_before)

    def _timed(self, phase: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.timer.add(phase, time.perf_counter() - t0)
        return out

    # -- checkpoints -------------------------------------------------------------------------

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
        self.timer.add("checkpoint", time.perf_counter() - t0)

    def _rank_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """This rank's own state (plain values, numpy arrays): what differs between ranks."""
        plain: dict[str, Any] = {
            "sample_rng": generator_state(self.sample_rng),
            "collector": self.collector.state_dict(),
        }
        policy_rng = getattr(self.policy, "rng", None)
        if isinstance(policy_rng, np.random.Generator):
            plain["policy_rng"] = generator_state(policy_rng)
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
            policy_rng = getattr(self.policy, "rng", None)
            if isinstance(policy_rng, np.random.Generator):
                self.policy.rng = run.rng("policy", run.rank, "resume", run.train_iter)
            return
        set_generator_state(self.sample_rng, mine["sample_rng"])
        self.collector.load_state_dict(mine["collector"])
        policy_rng = getattr(self.policy, "rng", None)
        if "policy_rng" in mine and isinstance(policy_rng, np.random.Generator):
            set_generator_state(policy_rng, mine["policy_rng"])
        if "buffer_meta" in mine:
            self._load_buffer(mine["buffer_meta"], arrays, prefix=f"rank{run.rank}/buffer/")

