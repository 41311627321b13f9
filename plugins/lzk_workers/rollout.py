"""Stepping a vector env with a policy: the loop collectors and evaluators share.

:class:`EpisodePlayer` writes the stepping loop once (:meth:`EpisodePlayer._run`) and stops it by
one of two rules:

* :meth:`EpisodePlayer.play`: every env finishes its quota of episodes. Envs that met their quota
  stop acting (they are left out of the policy batch and are not stepped), and because auto-reset
  happens on the step that ends an episode, each of them then sits at the first state of a fresh
  episode: a later call continues from there and no env step is wasted. Quotas per env, rather
  than "the first N episodes to finish", keep short episodes from being over-represented.
* :meth:`EpisodePlayer.play_segments`: every env acts until enough *pieces* have finished. A piece
  is a contiguous part of one env's episode; it finishes at the episode's end or when its last
  timestep reaches a multiple of ``segment_length`` (counted from the episode start, so pieces line
  up with the game segments a replay buffer cuts). Unfinished pieces stay with the player.

Either way the envs, their frame windows and the pieces being recorded persist between calls.
What the envs return is checked where it enters (:func:`check_finite`): a NaN or infinity in an
observation or reward stops the run with the env's id and row, whichever env plugin produced it.
An evaluation's loop can be given ``interrupt`` (the run's stop flag): it then raises
:class:`lzkernel.StopRequested` between steps once a stop signal arrived.

Shape letters: E envs, B acting rows (the active envs), A actions, O observation shape, S frames,
T transitions.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from lzkernel import (ActingPolicy, ActResult, EnvSpec, FrameEnvSpec, FrameWindow, RestartingVectorEnv,
                      ResumableVectorEnv, StepBatch, StopRequested, Trajectory, VectorEnv, encode_frames, progressed,
                      sample_from_weights)


def balanced_quotas(n: int, num_envs: int) -> np.ndarray:
    """[E] int64 episodes per env summing to ``n``; the first ``n % E`` envs get one more."""
    quota = np.full(num_envs, n // num_envs, np.int64)
    quota[: n % num_envs] += 1
    return quota


class RandomActor:
    """An :class:`~lzkernel.ActingPolicy` acting uniformly at random over legal actions.

    Used for random warm-up collection: visit_dist is uniform over the legal actions, values 0.
    """

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, *, mode: str,
            env_ids: np.ndarray, temperature: float = 1.0, epsilon: float = 0.0,
            timestep: np.ndarray | None = None, states: Sequence[Any] | None = None) -> ActResult:
        legal = np.asarray(legal, bool)  # [B, A]
        n_legal = legal.sum(axis=1)  # [B], >= 1 by the StepBatch contract
        action = sample_from_weights(legal.astype(np.float64), legal, self.rng)
        zeros = np.zeros(len(legal), np.float32)
        return ActResult(action=action, visit_dist=(legal / n_legal[:, None]).astype(np.float32),
                         root_value=zeros, pred_value=zeros.copy())

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """Stateless."""


class _PieceRecord:
    """One env's running piece of an episode, grown step by step, turned into a :class:`Trajectory`.

    It starts at an observation with episode timestep ``t0``; obs/legal/to_play hold T+1 entries
    after T transitions. Observations are kept as given: the player hands in uint8 frames for a
    :class:`~lzkernel.FrameEnvSpec` env (a quarter of float32's memory for a long episode).
    """

    def __init__(self, obs: np.ndarray, legal: np.ndarray, to_play: int, t0: int) -> None:
        self.t0 = t0
        self.obs, self.legal, self.to_play = [obs], [legal], [to_play]
        self.actions: list[int] = []
        self.rewards: list[float] = []
        self.visits: list[np.ndarray] = []
        self.root_values: list[float] = []
        self.pred_values: list[float] = []

    def __len__(self) -> int:
        return len(self.actions)

    def add(self, action: int, reward: float, visit: np.ndarray, root: float, pred: float,
            obs: np.ndarray, legal: np.ndarray, to_play: int) -> None:
        """One transition and the state it led to."""
        self.actions.append(action)
        self.rewards.append(reward)
        self.visits.append(visit)
        self.root_values.append(root)
        self.pred_values.append(pred)
        self.obs.append(obs)
        self.legal.append(legal)
        self.to_play.append(to_play)

    #: Per-transition fields (:meth:`pack`): name -> dtype that holds the recorded values exactly.
    _STEP = {"actions": np.int64, "rewards": np.float64, "visits": np.float32, "root_values": np.float64,
             "pred_values": np.float64}
    _OBS = {"legal": bool, "to_play": np.int64}  # per observation, besides obs (kept as recorded)

    @classmethod
    def pack(cls, records: Sequence[_PieceRecord]) -> dict[str, np.ndarray]:
        """The records as arrays: ``t0``, ``length`` [R] int64, the per-transition fields
        concatenated [ΣT, ...] and the per-observation ones [Σ(T+1), ...] (``obs`` in its
        recorded dtype). Needs at least one record."""
        a = records[0].legal[0].shape  # (A,): the trailing shape of visits and legal
        out = {"t0": np.array([r.t0 for r in records], np.int64),
               "length": np.array([len(r) for r in records], np.int64),
               "obs": np.concatenate([np.stack(r.obs) for r in records])}
        for name, dt in {**cls._STEP, **cls._OBS}.items():
            tail = a if name in ("visits", "legal") else ()
            out[name] = np.concatenate([np.asarray(getattr(r, name), dt).reshape(-1, *tail) for r in records])
        return out

    @classmethod
    def unpack(cls, arrays: dict[str, np.ndarray]) -> list[_PieceRecord]:
        """The records :meth:`pack` packed, equal field by field."""
        out, step, obs = [], 0, 0
        for t0, n in zip(arrays["t0"].tolist(), arrays["length"].tolist()):
            o = slice(obs, obs + n + 1)
            rec = cls(arrays["obs"][obs].copy(), arrays["legal"][obs].copy(), int(arrays["to_play"][obs]), t0)
            rec.obs = list(arrays["obs"][o].copy())
            rec.legal = list(arrays["legal"][o].copy())
            rec.to_play = [int(v) for v in arrays["to_play"][o]]
            sl = slice(step, step + n)
            rec.actions = [int(v) for v in arrays["actions"][sl]]
            rec.rewards = [float(v) for v in arrays["rewards"][sl]]
            rec.visits = list(arrays["visits"][sl].copy())
            rec.root_values = [float(v) for v in arrays["root_values"][sl]]
            rec.pred_values = [float(v) for v in arrays["pred_values"][sl]]
            out.append(rec)
            step, obs = step + n, obs + n + 1
        return out

    def to_trajectory(self, env_id: int, ended: bool, terminal: bool, episode_return: float) -> Trajectory:
        t = len(self.actions)
        return Trajectory(
            obs=np.stack(self.obs),
            actions=np.asarray(self.actions, np.int64),
            rewards=np.asarray(self.rewards, np.float32),
            visit_dist=np.stack(self.visits).astype(np.float32, copy=False),
            root_values=np.asarray(self.root_values, np.float32),
            pred_values=np.asarray(self.pred_values, np.float32),
            legal=np.stack(self.legal).astype(bool, copy=False),
            to_play=np.asarray(self.to_play, np.int64),
            timestep=np.arange(self.t0, self.t0 + t + 1, dtype=np.int64),
            ended=ended,
            terminal=terminal,
            env_id=env_id,
            episode_return=episode_return,
        )


def _final_to_play(previous: int) -> int:
    """``to_play`` at an episode's final observation, which the StepBatch does not carry (the row
    already belongs to the next episode): -1 stays -1; two players (1, 2) alternate."""
    return -1 if previous == -1 else 3 - previous


@dataclass
class FinishedEpisode:
    env_id: int
    episode_return: float
    length: int


@dataclass
class PlayResult:
    episodes: list[FinishedEpisode]  # episodes that ended in this call, in order of completion
    pieces: list[Trajectory]  # pieces that finished in this call, in order ([] when not recording)
    env_steps: int  # env steps taken by this call
    policy_metrics: dict[str, float]  # mean over act calls of each metric the policy returned
    env_failures: int = 0  # times an env raised and was recreated (StepBatch.restarted) since the last call


@dataclass
class _Progress:
    """What the running call has done so far: what its stop rule looks at."""

    episodes: np.ndarray  # [E] int64 episodes ended per env
    pieces: int = 0  # pieces finished (also counted when not recording)


#: A stop rule: the envs [E] bool that act next, given the call's progress; none ends the call.
_StopRule = Callable[[_Progress], np.ndarray]


class NonFiniteEnvOutput(RuntimeError):
    """An env returned a NaN or infinite observation or reward (RELIABILITY R7: caught where it
    enters, before it reaches a trajectory, the replay buffer or a checkpoint)."""


def check_finite(batch: StepBatch, rows: np.ndarray, who: str) -> None:
    """Raise :class:`NonFiniteEnvOutput` naming ``who`` (the env id) and the first bad row when a
    row in ``rows`` of ``batch`` has a non-finite reward or observation, or a row that ended its
    episode a non-finite final observation (elsewhere it is the observation)."""
    ended = rows[(batch.terminated | batch.truncated)[rows]]
    parts = (("reward", batch.reward, rows), ("observation", batch.obs, rows),
             ("final observation", batch.final_obs, ended))
    for what, arr, at in parts:
        if not len(at) or not np.issubdtype(arr.dtype, np.floating):
            continue
        ok = np.isfinite(arr[at].reshape(len(at), -1)).all(axis=1)
        if not ok.all():
            i = int(at[int(np.flatnonzero(~ok)[0])])
            raise NonFiniteEnvOutput(f"env {who!r} (env index {i}) returned a non-finite {what}: "
                                     f"{np.asarray(arr[i]).ravel()[:8]}")


def check_act(res: ActResult, b: int, a: int) -> ActResult:
    """Shapes and dtypes of a policy's answer for B rows; a clear error beats a broadcast bug."""
    action = np.asarray(res.action)
    if action.shape != (b,) or not np.issubdtype(action.dtype, np.integer):
        raise ValueError(f"policy.act returned action {action.dtype} {action.shape}, expected int [{b}]")
    visit = np.asarray(res.visit_dist, np.float32)
    root = np.asarray(res.root_value, np.float32)
    pred = np.asarray(res.pred_value, np.float32)
    if visit.shape != (b, a) or root.shape != (b,) or pred.shape != (b,):
        raise ValueError(
            f"policy.act returned visit_dist {visit.shape}, root_value {root.shape}, pred_value "
            f"{pred.shape}; expected [{b}, {a}], [{b}], [{b}]"
        )
    return ActResult(action.astype(np.int64), visit, root, pred, res.metrics)


class EpisodePlayer:
    """Plays on one vector env; keeps the envs' state and the running pieces between calls.

    ``record=False`` keeps only returns and lengths (evaluation), not trajectories. Recorded
    trajectories of a :class:`~lzkernel.FrameEnvSpec` env hold uint8 frames (``Trajectory.obs``).
    """

    def __init__(self, venv: VectorEnv, env_spec: EnvSpec, frame_stack: int, *, mode: str,
                 record: bool) -> None:
        self.venv = venv
        self.num_envs = venv.num_envs
        self.num_actions = env_spec.num_actions
        self.truncation_as_terminal = env_spec.truncation_as_terminal
        self.mode = mode
        self.record = record
        self.env_id = env_spec.id
        self.frame_scale = float(env_spec.frame_scale) if isinstance(env_spec, FrameEnvSpec) else None
        self.window = FrameWindow(venv.num_envs, tuple(env_spec.obs_shape), frame_stack,
                                  f"env {env_spec.id!r}'s observations")
        self._state: StepBatch | None = None  # the envs' current states (rows of the last batch)
        self.timestep = np.zeros(venv.num_envs, np.int64)  # [E] step index within the episode
        self._records: list[_PieceRecord | None] = [None] * venv.num_envs
        self._failures = 0  # env restarts not yet reported in a PlayResult
        self._unreset: list[int] = []  # envs restarted by a load whose policy state is still to reset

    @property
    def pending_transitions(self) -> np.ndarray:
        """[E] int64 transitions of each env's running (unfinished) piece; zeros when not recording."""
        return np.array([0 if rec is None else len(rec) for rec in self._records], np.int64)

    def restart(self) -> None:
        """Reset every env: each starts a fresh episode (running ones and their pieces are dropped)."""
        batch = self.venv.reset()
        ids = np.arange(self.num_envs)
        check_finite(batch, ids, self.env_id)
        if batch.restarted is not None:
            self._failures += int(batch.restarted.sum())
        self._state = batch
        self.timestep[:] = 0
        self.window.reset(ids, batch.obs)
        for i in ids:
            self._start(i, batch, 0)

    def _kept(self, obs: np.ndarray) -> np.ndarray:
        """A copy of one observation as a record keeps it (uint8 frames for a frame env)."""
        if self.frame_scale is None:
            return obs.copy()
        return encode_frames(obs, self.frame_scale, who="frame env observations")

    def _start(self, i: int, batch: StepBatch, t0: int) -> None:
        """Env i's next piece starts at its row of ``batch``, episode timestep ``t0``."""
        if self.record:
            self._records[i] = _PieceRecord(self._kept(batch.obs[i]), batch.legal[i].copy(), int(batch.to_play[i]), t0)

    def play(self, policy: ActingPolicy, quota: np.ndarray, *, temperature: float = 1.0,
             epsilon: float = 0.0, interrupt: Callable[[], bool] | None = None) -> PlayResult:
        """Act until env i has finished ``quota[i]`` more episodes, for every i.

        Pieces are not cut: each ended episode gives one piece, from where its env's running piece
        started (the episode start, unless :meth:`play_segments` left a piece running).
        ``interrupt``: checked before every step; when it returns True the call raises
        :class:`lzkernel.StopRequested` (the envs are left mid-episode: :meth:`restart` them).
        """
        quota = np.asarray(quota, np.int64)
        return self._run(policy, lambda p: p.episodes < quota, None, temperature, epsilon, interrupt)

    def play_segments(self, policy: ActingPolicy, segment_length: int, *, n_segments: int = 0,
                      n_episode: int = 0, temperature: float = 1.0, epsilon: float = 0.0) -> PlayResult:
        """Act with every env until at least ``n_segments`` pieces have finished and at least
        ``n_episode`` episodes have ended in this call.

        A piece finishes when its episode ends (``ended=True``) or when its last timestep is a
        positive multiple of ``segment_length`` (``ended=False``, ``terminal=False``); the env's
        next piece starts at that same observation and timestep, or at the reset observation and
        timestep 0 after an episode end.
        """
        if segment_length < 1:
            raise ValueError(f"segment_length must be >= 1, got {segment_length}")
        everyone, nobody = np.ones(self.num_envs, bool), np.zeros(self.num_envs, bool)

        def rule(p: _Progress) -> np.ndarray:
            return everyone if p.pieces < n_segments or p.episodes.sum() < n_episode else nobody

        return self._run(policy, rule, segment_length, temperature, epsilon)

    def _run(self, policy: ActingPolicy, acting: _StopRule, segment_length: int | None,
             temperature: float, epsilon: float, interrupt: Callable[[], bool] | None = None) -> PlayResult:
        """The stepping loop: act with the envs ``acting`` names until it names none; cut pieces
        at multiples of ``segment_length`` (None: only at episode ends).

        Calls ``policy.reset_envs(ids, mode)`` for the envs whose episode just ended, and for the
        envs the vector env recreated (``StepBatch.restarted``): their running piece is dropped
        unfinished and a new one starts at the new env's first state.
        """
        if self._state is None:
            self.restart()
        if self._unreset:
            policy.reset_envs(self._unreset, self.mode)
            self._unreset = []
        progress = _Progress(np.zeros(self.num_envs, np.int64))
        out = PlayResult([], [], 0, {})
        metric_sum: dict[str, float] = defaultdict(float)
        metric_n: dict[str, int] = defaultdict(int)
        while (active := acting(progress)).any():  # active: [E] bool
            if interrupt is not None and interrupt():
                raise StopRequested(f"stop requested while playing {self.mode} episodes of {self.env_id!r}")
            state = self._state
            assert state is not None
            ids = np.flatnonzero(active)  # [B] sorted env ids that act this step
            states = None if state.states is None else [state.states[i] for i in ids]
            res = check_act(
                policy.act(self.window.stacked(ids), state.legal[ids], state.to_play[ids], mode=self.mode,
                           env_ids=ids, temperature=temperature, epsilon=epsilon, timestep=self.timestep[ids],
                           states=states),
                len(ids), self.num_actions,
            )
            for k, v in (res.metrics or {}).items():
                metric_sum[k] += float(v)
                metric_n[k] += 1
            actions = np.zeros(self.num_envs, np.int64)
            actions[ids] = res.action
            batch = self.venv.step(actions, active=active)
            progressed()  # for the run's stall watchdog (lzkernel.watchdog)
            check_finite(batch, ids, self.env_id)
            ended = (batch.terminated | batch.truncated) & active  # [E]
            # [E] envs whose running episode was abandoned: acting ones whose step raised, and any
            # row of an env worker that was lost (lzk_envs.workers restarts all of its envs)
            failed = batch.abandoned()
            if batch.restarted is not None:
                self._failures += int(batch.restarted.sum())
            out.env_steps += len(ids) - int(failed[ids].sum())  # a step that raised took no transition
            self.timestep[ids] += 1  # now the timestep of the observation each transition led to
            for row, i in enumerate(ids):
                if not failed[i]:
                    self._advance(i, row, res, batch, bool(ended[i]), segment_length, progress, out)
            for i in np.flatnonzero(failed):  # the episode is abandoned: its piece is dropped, a new one starts
                self._start(i, batch, 0)
            fresh = np.flatnonzero(ended | failed)  # [F] envs at a new episode's first state
            going = ids[~(ended | failed)[ids]]
            self.window.push(going, batch.obs[going])
            self.window.reset(fresh, batch.obs[fresh])
            self.timestep[fresh] = 0
            self._state = batch
            if len(fresh):
                policy.reset_envs(fresh.tolist(), self.mode)
        out.policy_metrics = {k: metric_sum[k] / metric_n[k] for k in metric_sum}
        out.env_failures, self._failures = self._failures, 0
        return out

    def _advance(self, i: int, row: int, res: ActResult, batch: StepBatch, ended: bool,
                 segment_length: int | None, progress: _Progress, out: PlayResult) -> None:
        """Record env i's transition (policy row ``row``); emit its piece when it finishes."""
        t = int(self.timestep[i])  # timestep of the observation the transition led to
        rec = self._records[i]
        if rec is not None:
            to_play = _final_to_play(rec.to_play[-1]) if ended else int(batch.to_play[i])
            # The final state's legal mask is unknown (the row already holds the next episode):
            # all legal, which is harmless since no action is chosen there.
            legal = np.ones(self.num_actions, bool) if ended else batch.legal[i].copy()
            rec.add(int(res.action[row]), float(batch.reward[i]), res.visit_dist[row].copy(),
                    float(res.root_value[row]), float(res.pred_value[row]),
                    self._kept(batch.final_obs[i]), legal, to_play)
        # Cutting where the timestep is a multiple of L (not where the piece holds L transitions)
        # keeps pieces aligned with the episode start even if one started elsewhere.
        if not (ended or (segment_length is not None and t % segment_length == 0)):
            return
        progress.pieces += 1
        terminal, ret = False, 0.0
        if ended:
            terminal = bool(batch.terminated[i]) or (bool(batch.truncated[i]) and self.truncation_as_terminal)
            ret = float(batch.episode_return[i])
            out.episodes.append(FinishedEpisode(int(i), ret, int(batch.episode_length[i])))
            progress.episodes[i] += 1
        if rec is not None:
            out.pieces.append(rec.to_trajectory(int(i), ended, terminal, ret))
        # After an end batch.obs[i] is the reset observation (never the terminal one); after a
        # cut it is the observation just reached, which is also the emitted piece's obs[T].
        self._start(i, batch, 0 if ended else t)

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)`` of the work in progress: the vector env's state (``env/...``, a
        :class:`~lzkernel.ResumableVectorEnv`), frame windows ``window`` [E, S, *O], timesteps
        ``timestep`` [E] and the running pieces (``piece/...``, :meth:`_PieceRecord.pack`, for the
        envs ``piece/env`` [R]). Nothing before the first play; meta ``skipped`` says why when
        the vector env cannot be saved (a resume then starts fresh episodes)."""
        if self._state is None:
            return {"started": False}, {}
        if not isinstance(self.venv, ResumableVectorEnv):
            return {"started": False, "skipped": f"{type(self.venv).__name__} is not a ResumableVectorEnv"}, {}
        env_meta, env_arrays = self.venv.state_dict()
        if isinstance(self.venv, RestartingVectorEnv) and (taken := self.venv.take_restarts()) is not None:
            self._take_restarted(*taken)  # as the resumed run will go on with them
            env_meta, env_arrays = self.venv.state_dict()  # now without them pending
        arrays = {f"env/{k}": v for k, v in env_arrays.items()}
        arrays.update(window=self.window.frames.copy(), timestep=self.timestep.copy())
        ids = [i for i, r in enumerate(self._records) if r is not None]
        if ids:
            arrays["piece/env"] = np.array(ids, np.int64)
            packed = _PieceRecord.pack([self._records[i] for i in ids])  # type: ignore[misc]
            arrays.update({f"piece/{k}": v for k, v in packed.items()})
        return {"started": True, "env": env_meta, "record": self.record, "unreset": list(self._unreset),
                "failures": self._failures}, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict` (a fresh player of the same env spec, size and seed).
        A state without a started player leaves this one to start fresh episodes."""
        if not meta.get("started"):
            return
        if not isinstance(self.venv, ResumableVectorEnv):
            raise ValueError(f"{type(self.venv).__name__} is not a ResumableVectorEnv: cannot restore its episodes")
        if bool(meta["record"]) != self.record or arrays["window"].shape != self.window.frames.shape:
            raise ValueError(f"episode state (record={meta['record']}, window {arrays['window'].shape}) does not fit "
                             f"this player (record={self.record}, window {self.window.frames.shape})")
        self._state = self.venv.load_state_dict(meta["env"], {k[4:]: v for k, v in arrays.items()
                                                              if k.startswith("env/")})
        self.window.frames[:] = arrays["window"]
        self.timestep[:] = arrays["timestep"]
        self._records = [None] * self.num_envs
        if "piece/env" in arrays:
            pieces = _PieceRecord.unpack({k[6:]: v for k, v in arrays.items() if k.startswith("piece/")})
            for i, rec in zip(arrays["piece/env"].tolist(), pieces):
                self._records[i] = rec
        self._unreset = [int(i) for i in meta.get("unreset", [])]
        self._failures = int(meta.get("failures", 0))
        restarted = np.flatnonzero(self._state.abandoned())  # pending in the saved state (a venv saved alone)
        if len(restarted):
            self._restart_rows(restarted, self._state)

    def _take_restarted(self, ids: np.ndarray, batch: StepBatch) -> None:
        """Envs ``ids`` [R] were restarted outside a step (``batch``: their R first states): their
        rows of the current state become those."""
        state = self._state
        assert state is not None
        e = self.num_envs
        rows = {f: getattr(state, f).copy() for f in ("obs", "legal", "to_play")}
        for f, values in rows.items():
            values[ids] = getattr(batch, f)
        restarted = np.zeros(e, np.int64)
        restarted[ids] = batch.restarted
        self._state = StepBatch(**rows, reward=np.zeros(e, np.float32), terminated=np.zeros(e, bool),
                                truncated=np.zeros(e, bool), final_obs=rows["obs"].copy(),
                                episode_return=np.zeros(e, np.float32), episode_length=np.zeros(e, np.int64),
                                states=None if state.states is None else list(state.states), restarted=restarted)
        self._restart_rows(ids, self._state)

    def _restart_rows(self, ids: np.ndarray, state: StepBatch) -> None:
        """Envs ``ids`` start over at their rows of ``state`` (restarted, counted in its
        ``restarted``): their pieces are dropped, new ones start there, and the policy resets
        them at the next play."""
        self._failures += int(state.restarted[ids].sum())
        self.window.reset(ids, state.obs[ids])
        self.timestep[ids] = 0
        for i in ids:
            self._start(int(i), state, 0)
        self._unreset = sorted({*self._unreset, *(int(i) for i in ids)})

    def close(self) -> None:
        self.venv.close()
