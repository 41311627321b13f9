"""The shared trainer loop (SPEC §1.1/§1.2 reorganised), written once.

One epoch::

    evaluate (when due, rank 0; the stop decision is broadcast; a signal stops here)
    collect            (every rank, its own envs)
    schedule updates   (identical on every rank: counts are summed through the comm backend; checked)
    push + trim        (the buffer enforces its capacity)
    before_train()     (hook: epoch-level reanalysis)
    for i in range(updates):
        before_update(i)  (hook: in-loop reanalysis)
        sample → learn → priorities;  log / checkpoint when due
        stop on a signal; evaluate when due; stop on stop_value or max_train_iters
    after_epoch()      (hook: e.g. clear caches built with the old weights)
    stop on budget, stop_value or a signal (decided once, broadcast)

A run that stops inside an epoch's updates (a signal, ``run.max_train_iters``, an evaluation
that reached the stop value) with something of the epoch left to do saves where it stopped
(``_progress``: the epoch's update count, the updates done, whether the decisions after the last
one were taken), and so does every periodic checkpoint; a resumed run finishes that epoch first. With the collector's episodes, the buffer's kept-back pieces and every RNG in the
checkpoint (:mod:`lzk_loop.state`), K iterations, a resume and K more are the 2K iterations of
an uninterrupted run, bit for bit (one machine, one thread count: ``docs/architecture.md``).

Subclasses override the hooks; everything else (counters, metrics, the stop protocol, and with
:class:`~lzk_loop.state.LoopCheckpoints` checkpoints and resume) lives here so every algorithm
behaves the same way. The loop meets the other roles only through the kernel's Protocols
(:class:`lzkernel.LearningPolicy`, :class:`lzkernel.ReplayBuffer`, :class:`lzkernel.Collector`,
:class:`lzkernel.Evaluator`, :class:`lzkernel.UpdateSchedule`, :class:`lzkernel.CommBackend`): the
policy's :class:`lzkernel.TargetSpec` says how the buffer is built and how large a batch is, its
``exploration`` gives the collection temperature and ε; no algorithm's config field is read.

With several ranks (``run.world_size > 1``, see ``docs/distributed.md``) every decision that
changes control flow is taken collectively, so all ranks run the same collectives: evaluation
and stop-after-eval (rank 0 decides, broadcast), "enough data to train" (all ranks must be
ready), stop on budget or signal (any rank), reanalyse now (:meth:`LoopTrainer.agree`). The
epoch's update count is the schedule's, which must agree by construction (the first-party ones
do); the all-reduce of "enough data" also checks it, with ``train_iter``, and raises
:class:`lzk_loop.ranks.RanksDiverged` at once, naming every rank's values, where it does not. Rank
0's initial weights are broadcast once; after every update the floating buffers of the
policy's models that the update moved (``policy.updated_buffers()``: BatchNorm running
statistics) are averaged over ranks, so parameters *and* buffers stay bit-identical.
Checkpoints (written by rank 0) carry every rank's own state (sample RNG, policy RNG, collector
counters and running episodes, replay buffer), and resume requires the same world size.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lzk_loop import ranks
from lzk_loop.state import LoopCheckpoints
from lzkernel import (BufferOptions, CheckContext, Collector, Evaluator, LearningPolicy, ReplayBuffer, StopRequested,
                      UpdateSchedule, option, progressed)

if TYPE_CHECKING:
    from lzkernel.run import StopKind

log = logging.getLogger("lzkernel")


@dataclass
class LoopConfig:
    """Options every loop trainer has."""

    random_collect_episodes: int = option(
        0, doc="Episodes collected with a uniformly random policy before training (0: none).", min=0)
    eval_at_start: bool = option(True, doc="Evaluate once before the first collection (false: the first "
                                 "evaluation comes evaluator.every_train_iters updates in).")
    train_start_transitions: int = option(
        0, doc="Train only once the buffer holds more than max(this, batch_size) transitions.", min=0)
    eval_at_end: bool = option(False, doc="Evaluate once more when the run ends on a budget (env steps, train "
                               "iterations or time), so that its last weights have an evaluation (and ckpt/best "
                               "may move); one that reaches the stop value makes the run 'solved'.")


#: The loop trainers' options a resume may change (``Component.resume_safe``): they shape no state.
LOOP_RESUME_SAFE = ("eval_at_end",)
#: The stop kinds of a spent budget, after which ``trainer.eval_at_end`` evaluates the last weights.
BUDGET_STOPS = ("max_env_steps", "max_train_iters", "max_seconds")
#: The roles a loop trainer builds (LoopTrainer.__init__): each needs its section.
LOOP_ROLES = ("env", "policy", "buffer", "collector", "evaluator", "update_schedule")


def loop_check(ctx: CheckContext) -> list[str]:
    """Config rules of every loop trainer (its component's ``check``): training must be able to
    start, so every section it builds is there (all missing ones named at once, before a run
    directory is made) and the buffer can fill past the training threshold."""
    problems = []
    missing = [role for role in LOOP_ROLES if ctx.name(role) is None]
    if missing:
        problems.append(f"missing section{'s' if len(missing) > 1 else ''} {', '.join(missing)}: the trainer builds "
                        f"one component of each of {', '.join(LOOP_ROLES)} (configs/ has complete examples)")
    cfg, buf = ctx.options("trainer"), ctx.options("buffer")
    if isinstance(buf, BufferOptions) and cfg.train_start_transitions >= buf.capacity:
        problems.append(f"trainer.train_start_transitions ({cfg.train_start_transitions}) must be below buffer.capacity "
                        f"({buf.capacity}): training starts once the buffer holds more than that many transitions")
    return problems


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


class LoopTrainer(LoopCheckpoints):
    """Evaluate → collect → schedule → push → reanalyze → train → checkpoint → stop."""

    policy: LearningPolicy
    buffer: ReplayBuffer
    collector: Collector
    evaluator: Evaluator | None
    schedule: UpdateSchedule

    def __init__(self, cfg: LoopConfig, run: Any) -> None:
        self.cfg = cfg
        self.run = run
        self.env_spec = run.build("env")
        self.policy = run.build("policy", env_spec=self.env_spec)
        if run.world_size > 1:
            self._broadcast_initial_weights()
        self.spec = self.policy.target_spec  # the learning geometry: batch size, K, n, γ, frame stack
        self.buffer = run.build("buffer", env_spec=self.env_spec, target_spec=self.spec)
        frame_stack = self.spec.frame_stack
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
        self._solved: float | None = None  # the evaluation return that reached the stop value
        self._eval_abandoned = False  # the last evaluation was given up for a stop signal
        self._time_up = False  # rank 0's clock reached run.max_seconds (decided there, for every rank)
        #: Inside an epoch's updates: (updates of the epoch, updates done, decisions after the
        #: last one taken); None between epochs. Checkpointed (a resume finishes the epoch).
        self._progress: tuple[int, int, bool] | None = None

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

    def agree(self, local: bool) -> bool:
        """A control-flow decision taken once: rank 0's ``local`` value, broadcast to every rank
        (e.g. "reanalyse now", which depends on this rank's buffer size)."""
        run = getattr(self, "run", None)  # unit tests may drive the hooks without a run
        if run is None or run.world_size == 1:
            return bool(local)
        return bool(run.comm.broadcast_object(bool(local)))

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> None:
        """Run the loop to its budget, stop value or a signal, then save. An error that ends the
        run first saves what the completed iterations learned (one process only: with several
        ranks the others may be waiting in a collective, and the periodic checkpoints remain),
        so ``--resume auto`` continues from it."""
        try:
            self._loop()
        except Exception:
            self._save_after_error()
            raise

    def _loop(self) -> None:
        run = self.run
        resumed = self.resumed = self._resume()
        if not resumed and self.cfg.random_collect_episodes > 0:
            self._collect(random_policy=True, n_episode=self.cfg.random_collect_episodes)
        if not resumed and self.cfg.eval_at_start:
            self._evaluate_and_decide(force=True)  # every rank: it ends in a collective
        elif not resumed and self.evaluator is not None:
            self.evaluator.should_eval(run.train_iter)  # iteration 0 counts as evaluated: the first is every_train_iters later
        progress, self._progress = self._progress, None
        if resumed:
            # A resume with a higher stop value trains on. Only rank 0 has the evaluator that
            # knows the stop value: its answer holds on every rank (all stop and say "solved").
            still = self._solved is not None and self.evaluator is not None and self.evaluator.reached(self._solved)
            self._solved = self._agreed_solved(self._solved if still else None)
        if resumed and self._should_stop():  # the budget was spent already: nothing to do, nothing to save
            run.set_stop(*self._stop_reason())
            log.warning("nothing to do: %s; raise it to continue", run.stop_reason)
            return
        while True:
            if progress is not None:  # resumed inside an epoch: finish it
                updates = progress[0]
                stopped = self._train_epoch(updates, start=progress[1], decided=progress[2])
                progress = None
            else:
                eval_due, signalled, _ = self._decisions()  # the time budget: checked in _should_stop
                if signalled or (eval_due and self._evaluate_and_decide()):
                    break
                if eval_due and self._decisions()[1]:  # a signal during the evaluation: stop before collecting
                    break
                collected = self._collect()
                updates = int(self.schedule.updates(collected))
                self.before_train(updates)
                stopped = self._train_epoch(updates)
            if stopped and self._progress != (updates, updates, True):
                break  # inside the epoch: the checkpoint says where (self._progress)
            self.after_epoch()
            self.epoch += 1
            self._progress = None
            if self._should_stop():
                break
        run.set_stop(*self._stop_reason())
        if self.cfg.eval_at_end and run.stop_kind in BUDGET_STOPS:  # every rank: it ends in a collective
            self._evaluate_and_decide(force=True)
            run.set_stop(*self._stop_reason())  # solved, if it reached the stop value
        self._save()
        run.progress(run.stop_reason)  # the progress line's last words: why it ended

    def _train_epoch(self, updates: int, start: int = 0, decided: bool = True) -> bool:
        """Updates ``start`` .. ``updates - 1`` of this epoch (a resumed run starts inside it:
        ``decided=False`` first takes the decisions that follow update ``start - 1``). True when
        the run stops after an update (``self._progress`` says where), False when the epoch's
        updates are done (or there was not enough data)."""
        run = self.run
        batch_size = self.spec.batch_size
        if start > 0:
            self._progress = (updates, start, decided)
            if not decided and self._after_update():
                return True
            ready = True  # updates ran in this epoch already
        else:
            needed = max(batch_size, self.train_start_transitions())
            # Train only when every rank holds enough data (decided once per epoch: the buffer size
            # does not change inside the update loop), so all ranks run the same number of updates.
            # With several ranks the same all-reduce checks that they agree on train_iter and on
            # the schedule's count, and raises at once, naming both, where they do not.
            local = self.buffer.num_transitions > needed
            if run.world_size > 1:
                schedule = f"update_schedule '{run.config.sections.get('update_schedule', ('?',))[0]}'"
                ready = ranks.agree_on_epoch(run, updates, local, schedule) and updates > 0
            else:
                ready = local and updates > 0
        for i in range(start, updates):
            self.before_update(i, updates)
            if not ready:
                break
            t0 = time.perf_counter()
            batch = self.buffer.sample(batch_size, self.sample_rng, self.policy)
            batch = self.prepare_batch(batch)
            t1 = time.perf_counter()
            metrics, priorities = self.policy.learn(batch)
            if run.world_size > 1:
                ranks.average_updated_buffers(run.comm, run.world_size, self.policy)
            t2 = time.perf_counter()
            self.buffer.update_priorities(batch.indices, priorities)
            self.timer.add("sample", t1 - t0)
            self.timer.add("learn", t2 - t1)
            run.train_iter += 1
            progressed()  # for the run's stall watchdog (lzkernel.watchdog)
            self._progress = (updates, i + 1, False)
            for k, v in metrics.items():
                self._pending[k].append(float(v))
            if run.train_iter % run.cfg.log_every == 0:
                self._emit_train()
            if run.cfg.checkpoint_every and run.train_iter % run.cfg.checkpoint_every == 0:
                self._save()
            if self._after_update():
                return True
        return False

    def _after_update(self) -> bool:
        """The decisions after an update: stop on a signal (leave within one update, the caller
        saves), evaluate when due (between updates too, so evaluations fall every N iterations
        exactly), stop on the evaluation, ``max_train_iters`` or ``max_seconds``. True: stop now."""
        run = self.run
        eval_due, signalled, time_up = self._decisions()
        if signalled:  # the decisions are left untaken: a resumed run takes them
            self._stop_now = True
            return True
        stop = bool(eval_due and self._evaluate_and_decide())
        if self._eval_abandoned:  # a signal during the evaluation: it is due again after a resume
            self._stop_now = True
            return True
        assert self._progress is not None
        self._progress = (self._progress[0], self._progress[1], True)
        self._time_up = time_up
        if stop or time_up:
            self._stop_now = True
        return stop or time_up or run.train_iter >= run.cfg.max_train_iters

    # -- phases ------------------------------------------------------------------------------

    def _collect(self, random_policy: bool = False, n_episode: int | None = None) -> int:
        run = self.run
        t0 = time.perf_counter()
        temperature, epsilon = (float(x) for x in self.policy.exploration(run.train_iter, run.env_steps))
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

    def _decisions(self) -> tuple[bool, bool, bool]:
        """(evaluation due, stop signal received, ``run.max_seconds`` reached), decided on rank 0
        and broadcast in one collective so that no rank can take a different branch (the ranks'
        clocks started at different times). A signal comes first: the evaluator then records
        nothing, and a resumed run evaluates where this one would have."""
        signalled = bool(self.run.stop_requested)
        due = (not signalled and self.evaluator is not None and bool(self.evaluator.should_eval(self.run.train_iter)))
        decided = self.run.comm.broadcast_object([due, signalled, self._over_time()])
        return bool(decided[0]), bool(decided[1]), bool(decided[2])

    def _over_time(self) -> bool:
        """This rank's clock has reached ``run.max_seconds`` (only rank 0's is ever used)."""
        budget = self.run.cfg.max_seconds
        return budget is not None and self.run.wall_time >= budget

    def _evaluate_and_decide(self, force: bool = False) -> bool:
        """Evaluate on rank 0 (when ``force`` or due) and return the broadcast stop decision:
        True when the evaluation reached the stop value, or when a stop signal made the evaluator
        give it up (:class:`lzkernel.StopRequested`; ``self._eval_abandoned`` then says so: nothing
        was recorded, and a resumed run evaluates here again)."""
        run = self.run
        stop = abandoned = False
        if self.evaluator is not None:
            t0 = time.perf_counter()
            if force:
                self.evaluator.should_eval(run.train_iter)  # record this evaluation's iteration
            try:
                metrics: dict[str, float] | None = self.evaluator.evaluate(self.policy)
            except StopRequested:
                metrics, abandoned = None, True
            self.timer.add("eval", time.perf_counter() - t0)
            if metrics is not None:
                mean = float(metrics["eval/return_mean"])
                self.last_eval = mean
                run.emit_eval(metrics)
                if self.evaluator.is_best(mean):
                    run.save_checkpoint(self._state(arrays=False)[0], tag="best")
                # LightZero stops only after training started (train_iter > 0); so do we.
                stop = bool(self.evaluator.reached(mean)) and run.train_iter > 0
                if stop:
                    self._solved = mean
        stop, abandoned, solved = run.comm.broadcast_object([stop, abandoned, self._solved])
        stop, abandoned = bool(stop), bool(abandoned)
        self._solved = None if solved is None else float(solved)  # rank 0's: every rank's stop kind is "solved"
        self._eval_abandoned = abandoned
        return stop or abandoned

    def _agreed_solved(self, solved: float | None) -> float | None:
        """Rank 0's ``solved`` on every rank (one broadcast; the value itself with one rank)."""
        if self.run.world_size == 1:
            return solved
        agreed = self.run.comm.broadcast_object(solved)
        return None if agreed is None else float(agreed)

    def _should_stop(self) -> bool:
        run = self.run
        if not self._time_up:  # rank 0's clock decides for every rank (one broadcast)
            self._time_up = bool(run.comm.broadcast_object(self._over_time()) if run.world_size > 1
                                 else self._over_time())
        local = (
            self._stop_now
            or self._solved is not None
            or run.env_steps >= run.cfg.max_env_steps
            or run.train_iter >= run.cfg.max_train_iters
            or self._time_up
            or run.stop_requested
        )
        # Budgets are identical on every rank; a signal may reach one rank only: stop if any rank
        # wants to (one all-reduce, the same answer everywhere).
        return self._any_rank(bool(local))

    def _stop_reason(self) -> tuple[StopKind, str]:
        """Why the loop ended: its kind and the same in words (``run.set_stop``: the summary and
        the log say it). A signal first (it may arrive after a budget was reached: the run still
        saved and left because of it), then the stop value, then the budgets."""
        run, cfg = self.run, self.run.cfg
        if run.stop_signal is not None:
            return "signal", f"stopped by {signal.Signals(run.stop_signal).name}"
        if self._solved is not None:
            return "solved", f"solved: eval/return_mean {self._solved:g} has reached evaluator.stop_value"
        if run.train_iter >= cfg.max_train_iters:
            return "max_train_iters", f"train_iter {run.train_iter} has reached run.max_train_iters={cfg.max_train_iters}"
        if run.env_steps >= cfg.max_env_steps:
            return "max_env_steps", f"env_steps {run.env_steps} has reached run.max_env_steps={cfg.max_env_steps}"
        if self._time_up:
            return "max_seconds", f"wall time {run.wall_time:.1f} s has reached run.max_seconds={cfg.max_seconds:g}"
        if run.world_size > 1 and not run.stop_requested:  # this rank saw no signal: another did
            return "peer_signal", "stopped by another rank's signal"
        return "requested", "stopped"

    def _emit_train(self) -> None:
        metrics = {k: float(np.mean(v)) for k, v in self._pending.items() if v}
        self._pending.clear()
        metrics.update(self.timer.metrics())
        metrics["time/comm_s"] = round(float(self.run.comm.seconds), 3)  # in collectives, this process
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

    # -- keeping ranks identical (see lzk_loop.ranks) ---------------------------------------

    def _broadcast_initial_weights(self) -> None:
        ranks.broadcast_initial_weights(self.run.comm, self.policy)
