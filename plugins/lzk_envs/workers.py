"""Envs in worker processes (``env.workers: W``): the run's E envs split into W contiguous shares,
each a :class:`~lzk_envs.gym_vector.GymVectorEnv` in its own process (:mod:`lzk_envs.env_worker`).

Why: the workers step their envs at the same time (an expensive env on a machine with cores to
spare), and an env that crashes its process (a segfault in an emulator) or hangs does not take the
trainer with it: a worker that dies is seen at once (its socket closes: RELIABILITY A2) and one
that does not answer within ``env.step_timeout_s`` is killed (A3). Such a loss in a step or a
reset counts as a failure of each of the worker's envs (``env.max_restarts``, as an env that
raises): while the restarts in a row allow, a new worker starts those envs anew from their restart
seeds after the backoff (their running episodes are dropped, every row counted in
``StepBatch.restarted``); past that, or with ``max_restarts`` 0, the run ends with one line naming
the worker's env indices (the last completed iteration stays resumable). A worker lost while
loading a resumed run's state is replaced too, its envs started anew instead of restored. A
worker found lost while saving (``state_dict``: it died while the learner ran) is replaced the same way; its rows
wait as pending restarts, which the episode player takes at once (:meth:`take_restarts`) before
saving again; left pending, the state marks them (``pending_restarts``) and the next step (or a
resumed run's load) reports them as restarted. An env that *raises* is restarted inside its worker as
in-process.

The results are the in-process vector env's, row for row: env i is seeded ``seed + i`` and its
restart seeds are those of env i, and :meth:`WorkerVectorEnv.state_dict` writes the in-process
format (the shares' states joined), so a checkpoint resumes with any ``env.workers``. The
restart counts of a worker's envs live in the worker; the parent keeps a copy (each reply that
restarted an env carries them, each episode end starts a row anew), from which it restarts the
envs of a worker that is lost.

Shape letters: E envs, W workers.
"""
from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from dataclasses import fields, replace
from multiprocessing.connection import Connection
from typing import Any, Callable

import numpy as np

from lzkernel import ConfigError, StepBatch, progressed
from lzk_envs.gym_vector import EnvError
from lzk_envs.restarts import RestartBook, pause
from lzk_envs.vector import check_step_args

log = logging.getLogger("lzkernel")

#: Seconds a worker may take to make its envs (an emulator loads its ROM) before it counts as hung.
INIT_TIMEOUT_S = 120.0
#: Seconds a closing worker gets before it is killed.
CLOSE_TIMEOUT_S = 5.0
#: How often a waiting parent checks that the worker process still lives (its socket may be held
#: open by a process the env started, so a closed socket is not the only sign of its end).
CHECK_S = 0.5


class WorkerTraceback(Exception):
    """The traceback of an error raised in an env worker (the cause of the error raised here)."""


def shares(num_envs: int, workers: int) -> list[tuple[int, int]]:
    """``[(first, count)]``: E envs in min(W, E) contiguous shares, the first ``E % W`` one larger."""
    w = max(1, min(workers, num_envs))
    counts = [num_envs // w + (k < num_envs % w) for k in range(w)]
    return [(sum(counts[:k]), counts[k]) for k in range(w)]


def join_batches(batches: list[StepBatch]) -> StepBatch:
    """The shares' batches as one, rows in env order (``restarted`` None unless a share has one)."""
    joined = {f.name: np.concatenate([getattr(b, f.name) for b in batches])
              for f in fields(StepBatch) if f.name not in ("states", "restarted")}
    if all(b.restarted is None for b in batches):
        return StepBatch(**joined)
    restarted = np.concatenate([b.restarted if b.restarted is not None else np.zeros(len(b.obs), np.int64)
                                for b in batches])
    return StepBatch(**joined, restarted=restarted)


_PER_ENV = ("replay_seed", "replay_rng", "env_seed", "pending_restarts")
_PER_ENV_ARRAYS = ("lengths", "obs", "legal", "ret", "len")
_BOOK_LISTS = ("in_a_row", "restarts_of", "first")


def with_restarts(batch: StepBatch, extra: np.ndarray | None) -> StepBatch:
    """``batch`` with ``extra`` [E] more restarts counted per row (None: none more)."""
    if extra is None:
        return batch
    extra = np.asarray(extra, np.int64)
    return replace(batch, restarted=extra.copy() if batch.restarted is None else batch.restarted + extra)


def join_states(states: list[tuple[dict[str, Any], dict[str, np.ndarray]]]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The shares' ``state_dict()`` results as the in-process vector env's over all E envs."""
    metas = [m for m, _ in states]
    meta = {**metas[0], "num_envs": sum(m["num_envs"] for m in metas), "first_index": 0}
    for key in _PER_ENV:
        if all(key in m for m in metas):  # pending_restarts: only the parent adds it (state_dict)
            meta[key] = [x for m in metas for x in m[key]]
    books = [m["restarts"] for m in metas]
    meta["restarts"] = {**{k: [x for b in books for x in b[k]] for k in _BOOK_LISTS},
                        "failures": sum(b["failures"] for b in books)}
    arrays = {k: np.concatenate([a[k] for _, a in states]) for k in ("actions", *_PER_ENV_ARRAYS)}
    return meta, arrays


def split_state(meta: dict[str, Any], arrays: dict[str, np.ndarray],
                parts: list[tuple[int, int]]) -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """The in-process state of E envs cut into the shares' states (:func:`join_states` undone)."""
    if meta.get("kind") != "gymnasium" or int(meta.get("num_envs", -1)) != sum(c for _, c in parts):
        raise ValueError(f"env state of {meta.get('num_envs')} {meta.get('kind')} envs does not fit "
                         f"{sum(c for _, c in parts)} gymnasium envs")
    ends = np.concatenate([[0], np.cumsum(arrays["lengths"])])
    book = meta.get("restarts")
    out = []
    for k, (a, n) in enumerate(parts):
        b = a + n
        part = {**meta, "num_envs": n, "first_index": a, **{key: meta[key][a:b] for key in _PER_ENV if key in meta}}
        if book is not None:
            part["restarts"] = {**{key: book[key][a:b] for key in _BOOK_LISTS},
                                "failures": book["failures"] if k == 0 else 0}
        cut = {key: arrays[key][a:b] for key in _PER_ENV_ARRAYS}
        cut["actions"] = arrays["actions"][ends[a]:ends[b]]
        out.append((part, cut))
    return out


class _Worker:
    """One worker process and its end of the socket."""

    def __init__(self, first: int, count: int, replaces: int | None = None) -> None:
        """``replaces``: the pid of the lost worker whose envs this one takes over."""
        self.first, self.count, self.replaces = first, count, replaces
        mine, theirs = socket.socketpair()
        try:  # its own session: a Ctrl-C or SIGTERM to the trainer's group is the trainer's to handle
            self.proc = subprocess.Popen([sys.executable, "-m", "lzk_envs.env_worker", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.pending = False  # a request is unanswered (the worker is busy, or hung)
        self.book: dict[str, Any] | None = None  # the restart counts the last answer carried

    def name(self) -> str:
        last = self.first + self.count - 1
        instead = f", replacing worker {self.replaces}" if self.replaces is not None else ""
        return f"env worker {self.proc.pid} (env indices {self.first}..{last}{instead})"

    def send(self, request: tuple[Any, ...]) -> None:
        self.pending = True  # owed from now on (a worker found dead here owes it for good)
        try:
            self.conn.send(request)
        except OSError:
            self.fail("died")

    def reply(self, timeout: float, what: str = "did not answer within {t:g} s (env.step_timeout_s)") -> Any:
        """The answer to the last request: its value, or the error it reports raised here (the
        worker's traceback chained as its cause). ``timeout``: seconds without an answer or a
        sign of progress (``("alive",)``, which also counts as this process's progress)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                ready = self.conn.poll(min(CHECK_S, max(0.0, deadline - time.monotonic())))
                answer = self.conn.recv() if ready else None
            except (EOFError, OSError):
                self.fail("died")
            if answer is None:
                if self.proc.poll() is not None:
                    self.fail("died")
                if time.monotonic() >= deadline:
                    self.proc.kill()
                    self.proc.wait()
                    raise EnvError(f"{self.name()} {what.format(t=timeout)}: a hung env? The worker was killed")
                continue
            if answer[0] == "alive":
                progressed()
                deadline = time.monotonic() + timeout
                continue
            break
        self.pending = False
        if answer[0] == "ok":
            self.book = answer[2]
            return answer[1]
        kind, message, trace = answer[1], answer[2], answer[3]
        error = ConfigError(message) if kind == "config" else ValueError(message) if kind == "value" else EnvError(message)
        raise error from WorkerTraceback(f"in {self.name()}:\n{trace}")

    def fail(self, what: str) -> None:
        code = self.proc.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        raise EnvError(f"{self.name()} {what} ({how}): its envs are lost") from None

    def close(self) -> None:
        """Ask the worker to close its envs and end; kill it when it does not within
        :data:`CLOSE_TIMEOUT_S`, or at once when it still owes an answer (hung, or the run is
        leaving on another worker's error)."""
        if self.pending:
            self.proc.kill()
        else:
            try:
                self.conn.send(("close",))
            except OSError:
                pass
        try:
            self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


def make_vector(spec: Any, num_envs: int, seed: int) -> Any:
    """``spec.make_vector``'s work for the specs with ``workers``: :class:`WorkerVectorEnv` when
    ``spec.workers`` is set, else ``spec.make_local_vector`` (the envs in this process)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if spec.workers:
        return WorkerVectorEnv(spec, num_envs, seed, spec.workers, spec.step_timeout_s)
    return spec.make_local_vector(num_envs, seed)


class WorkerVectorEnv:
    """The :class:`lzkernel.VectorEnv` (and :class:`lzkernel.ResumableVectorEnv`) of ``spec``'s E
    envs in W worker processes (module docstring). ``spec.make_local_vector(n, seed, first)``
    makes a share in a worker; the spec travels there pickled."""

    def __init__(self, spec: Any, num_envs: int, seed: int, workers: int, step_timeout_s: float) -> None:
        self.spec = spec
        self.num_envs, self.seed, self.timeout = num_envs, seed, step_timeout_s
        self.env_id = spec.id
        self.parts = shares(num_envs, workers)
        # The parent's copy of each share's restart counts (RestartBook.state()): module docstring.
        self.books = [RestartBook(spec.restarts, seed, count, first).state() for first, count in self.parts]
        # k: the first states of share k's envs, restarted when its worker was found lost while
        # saving (state_dict), which the next step or reset reports instead of stepping them
        self._pending: dict[int, StepBatch] = {}
        self.workers: list[_Worker] = []
        try:
            for first, count in self.parts:
                self.workers.append(_Worker(first, count))
            self._all([self._init(k) for k in range(len(self.parts))], INIT_TIMEOUT_S,
                      "did not make its envs within {t:g} s")
        except ConfigError as exc:
            self.close()
            raise ConfigError(f"{exc} (env.workers: a worker, a fresh process, makes the envs: an env a plugin "
                              "registers when imported needs its module:Id form)") from exc.__cause__
        except BaseException:
            self.close()
            raise

    def _init(self, k: int) -> tuple[Any, ...]:
        """The request that makes share k's envs in a new worker (with the run's secret values,
        which its log lines leave out)."""
        from lzkernel.config.redact import remembered

        first, count = self.parts[k]
        return ("init", self.spec, count, self.seed, first, remembered())

    def _exchange(self, requests: dict[int, tuple[Any, ...]], timeout: float | None = None, *what: str,
                  keep_lost: bool = True) -> tuple[dict[int, Any], dict[int, EnvError]]:
        """Send worker k ``requests[k]`` for each k, then collect the answers (the workers work
        meanwhile): ``(answers, lost)``: the answers by k, and the workers that died or hung (each
        killed) with the error that says so. An error a worker reported is raised once every
        answer is in (no worker is left owing one). Without ``keep_lost`` the first loss is
        raised at once (the others are killed when closing)."""
        if not self.workers:
            raise RuntimeError(f"gymnasium env {self.env_id!r}: the env workers were closed")
        answers: dict[int, Any] = {}
        lost: dict[int, EnvError] = {}
        errors: list[Exception] = []
        for k, request in requests.items():
            try:
                self.workers[k].send(request)
            except EnvError as exc:  # it died before the request
                if not keep_lost:
                    raise
                lost[k] = exc
        for k in requests:
            if k in lost:
                continue
            worker = self.workers[k]
            try:
                answers[k] = worker.reply(self.timeout if timeout is None else timeout, *what)
            except (ConfigError, ValueError, EnvError) as exc:
                if not worker.pending:  # an error it reported
                    errors.append(exc)
                elif isinstance(exc, EnvError) and keep_lost:  # died or hung
                    lost[k] = exc
                else:
                    raise
        if errors:
            raise errors[0]
        return answers, lost

    def _all(self, requests: list[tuple[Any, ...]], timeout: float | None = None, *what: str,
             replace_lost: bool = False, on_lost: Callable[[dict[int, EnvError]], dict[int, Any]] | None = None
             ) -> list[Any]:
        """Send each worker its request, then collect the answers (the workers work meanwhile):
        :meth:`_answers` for every worker, in worker order."""
        answers = self._answers(dict(enumerate(requests)), timeout, *what, replace_lost=replace_lost, on_lost=on_lost)
        return [answers[k] for k in range(len(self.workers))]

    def _answers(self, requests: dict[int, tuple[Any, ...]], timeout: float | None = None, *what: str,
                 replace_lost: bool = False, on_lost: Callable[[dict[int, EnvError]], dict[int, Any]] | None = None
                 ) -> dict[int, Any]:
        """Worker k's answer to ``requests[k]``, by k. A worker that died or hung ends the call
        (the others are killed when closing), unless ``replace_lost`` and ``env.max_restarts``
        allow: then ``on_lost`` (default :meth:`_replace`) answers for the lost workers. An error
        a worker reported is raised once every answer is in."""
        replace_lost = replace_lost and self.spec.restarts.max_restarts > 0
        answers, lost = self._exchange(requests, timeout, *what, keep_lost=replace_lost)
        if lost:
            answers.update((on_lost or self._replace)(lost))
        return answers

    def _replace(self, lost: dict[int, EnvError]) -> dict[int, StepBatch]:
        """The workers ``lost`` (k: the error saying it died, or hung and was killed) in a step
        or reset, replaced. Each env of a lost worker counts one failure in a row
        (:meth:`RestartBook.count`; past ``env.max_restarts`` the EnvError, chained to the loss,
        ends the run); after the longest backoff of them, new workers make the envs and start
        them from their restart seeds, all at once. A new worker that dies or hangs doing so is
        one more failure in a row of its envs, as a new env that raises is in-process. The new
        workers' first states by k: every row restarted, reward 0, no episode end."""
        books = {}
        for k in lost:
            first, count = self.parts[k]
            books[k] = RestartBook(self.spec.restarts, self.seed, count, first)
            books[k].load(self.books[k])
        answers: dict[int, StepBatch] = {}
        losses = dict.fromkeys(lost, 0)  # k: times its share was lost in this call
        while lost:
            waits = []
            for k, exc in lost.items():
                losses[k] += 1
                self.workers[k].close()
                what = str(exc)
                waits.append(max([books[k].count(i, exc, what, EnvError) for i in range(self.parts[k][1])]))
            wait = max(waits)
            for k, exc in lost.items():
                log.warning("%s; starting a new worker for its envs (restart %d of at most %d in a row, waiting %.1f s "
                            "first)", exc, max(books[k].in_a_row), self.spec.restarts.max_restarts, wait)
            pause(wait)
            for k in lost:
                self.workers[k] = _Worker(*self.parts[k], replaces=self.workers[k].proc.pid)
            _, again = self._exchange({k: self._init(k) for k in lost}, INIT_TIMEOUT_S,
                                      "did not make its envs within {t:g} s")
            started, lost_starting = self._exchange({k: ("restart", books[k].state(), losses[k]) for k in lost
                                                     if k not in again})
            for k in started:  # the counts with the loss, whichever call reports these rows
                self.books[k] = self.workers[k].book or self.books[k]
            answers.update(started)
            lost = {**again, **lost_starting}
        return answers

    def _rows(self, batches: list[StepBatch]) -> StepBatch:
        """The shares' reset or step batches joined; the parent's restart counts brought up to
        date (those an answer carried, else the rows whose episode ended start anew)."""
        for k, (worker, batch) in enumerate(zip(self.workers, batches)):
            if worker.book is not None:
                self.books[k] = worker.book
                continue
            book = self.books[k]
            for i in np.flatnonzero(batch.terminated | batch.truncated):
                book["in_a_row"][i], book["first"][i] = 0, None
        return join_batches(batches)

    def reset(self) -> StepBatch:
        batches = self._all([("reset",)] * len(self.workers), replace_lost=True)
        for k, pending in self._pending.items():  # those restarts are still to be counted
            batches[k] = with_restarts(batches[k], pending.restarted)
        self._pending.clear()
        return self._rows(batches)

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """As :meth:`GymVectorEnv.step`, except that the rows of a worker lost in this call, or
        found lost while saving since the last call, are all restarted (:meth:`_replace`),
        unstepped ones too."""
        actions, active = check_step_args(f"gymnasium env {self.env_id!r}", self.num_envs, actions, active)
        requests = {k: ("step", actions[a:a + n], active[a:a + n]) for k, (a, n) in enumerate(self.parts)
                    if k not in self._pending}
        answers = self._answers(requests, replace_lost=True)
        answers.update(self._pending)
        self._pending.clear()
        return self._rows([answers[k] for k in range(len(self.workers))])

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The in-process format (:func:`join_states`): a checkpoint resumes with any ``env.workers``.
        A worker found lost here is replaced as in a step (while ``env.max_restarts`` allows):
        the state holds its envs' first states, and ``pending_restarts`` [E] says which rows the
        next step or reset reports as restarted (a resumed run's load reports them)."""
        states = self._all([("state",)] * len(self.workers), replace_lost=True, on_lost=self._hold)
        meta, arrays = join_states(states)
        if self._pending:
            pending = np.zeros(self.num_envs, np.int64)
            for k, batch in self._pending.items():
                a, n = self.parts[k]
                pending[a:a + n] = batch.restarted
            meta["pending_restarts"] = pending.tolist()
        return meta, arrays

    def _hold(self, lost: dict[int, EnvError]) -> dict[int, Any]:
        """Workers lost while saving: replaced, their first states held for the next step, and
        the new workers' states answered."""
        for k, batch in self._replace(lost).items():  # a share lost again before its rows were taken: both count
            held = self._pending.get(k)
            self._pending[k] = with_restarts(batch, None if held is None else held.restarted)
        return self._exchange({k: ("state",) for k in lost}, keep_lost=False)[0]

    def take_restarts(self) -> tuple[np.ndarray, StepBatch] | None:
        """The rows of the workers replaced while saving (:class:`lzkernel.RestartingVectorEnv`):
        env indices [R] and their first states; from now on they are stepped as any row."""
        if not self._pending:
            return None
        ks = sorted(self._pending)
        ids = np.concatenate([np.arange(self.parts[k][0], sum(self.parts[k])) for k in ks])
        batch = join_batches([self._pending.pop(k) for k in ks])
        return ids, batch

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepBatch:
        """As :meth:`GymVectorEnv.load_state_dict`. A worker that dies or hangs while loading
        (its envs' replay crashed it) is replaced as in a step while ``env.max_restarts`` allows,
        counted from the saved restart counts: its envs start anew from their restart seeds
        instead of their saved states, and every row of the share is reported restarted, with
        the restarts the state still held pending."""
        self._pending.clear()
        parts = split_state(meta, arrays, self.parts)  # a long replay sends signs of progress: step_timeout_s applies
        for k, (part, _) in enumerate(parts):
            if part.get("restarts") is not None:  # else saved before restarts existed: none happened
                self.books[k] = part["restarts"]

        def lost_loading(lost: dict[int, EnvError]) -> dict[int, StepBatch]:
            return {k: with_restarts(batch, parts[k][0].get("pending_restarts"))
                    for k, batch in self._replace(lost).items()}

        return join_batches(self._all([("load", m, a) for m, a in parts], replace_lost=True, on_lost=lost_loading))

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []
