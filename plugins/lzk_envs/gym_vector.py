"""The gymnasium vector env: E envs stepped one after the other in this process, with same-step
auto-reset, env restarts (:mod:`lzk_envs.restarts`) and exact resume (module
:mod:`lzk_envs.gym` has the adapter's reasons and the env spec).

Shape letters: E envs, A actions, O observation shape.
"""
from __future__ import annotations

import logging
from array import array
from typing import Any, Callable

import gymnasium
import numpy as np

from lzkernel import (ConfigError, FrameCallback, LzkernelError, StepBatch, generator_state, progressed,
                      set_generator_state)
from lzk_envs.restarts import EnvRestarts, RestartBook
from lzk_envs.vector import check_restored, check_step_args

log = logging.getLogger("lzkernel")


class EnvError(LzkernelError, RuntimeError):
    """An environment misbehaved at run time (non-finite values, bad action mask, an exception
    from its ``reset``/``step``, chained as the cause), named by env id and env index."""



class GymVectorEnv:
    """E gymnasium envs stepped one after the other, with same-step auto-reset.

    Invariants between calls: ``_obs[i]``, ``_legal[i]`` are env i's current state (of its
    running episode), ``_ret[i]``/``_len[i]`` that episode's return and length so far.

    Checkpoints (:class:`lzkernel.ResumableVectorEnv`) hold no env object: for every env, how its
    replay starts (its seed, or the state of its ``np_random`` right before the reset) and the
    actions taken since; :meth:`load_state_dict` replays them on fresh envs and checks that they
    reach the saved observations. ``replay_from="episode"`` (gymnasium's envs) starts at the
    running episode's reset: exact for envs whose reset draws its randomness from ``np_random``
    and keeps nothing of the previous episode. ``"seed"`` (envs whose episodes share state, as
    Atari's lives of one game) replays everything since the env's seeded first reset.

    An env that raises is recreated as ``restarts`` says (:class:`EnvRestarts`, counted in
    ``self.book``); the call that recreated it counts it in its row of ``StepBatch.restarted``,
    and its replay starts at the new env's seeded reset.
    """

    def __init__(
        self,
        env_id: str,
        make_env: Callable[[int], gymnasium.Env],
        num_envs: int,
        seed: int,
        obs_shape: tuple[int, ...],
        num_actions: int,
        on_frame: FrameCallback | None = None,
        replay_from: str = "episode",
        restarts: EnvRestarts = EnvRestarts(),
        first_index: int = 0,
    ) -> None:
        """``make_env(i)``: a new env for index i; ``on_frame``: env 0 (made with
        ``render_mode="rgb_array"``) draws every state its steps reach into it, before any
        auto-reset (:class:`lzkernel.RenderableEnvSpec`); ``replay_from``: where a restored env's
        replay starts (class docstring); ``restarts``: what to do when an env raises;
        ``first_index``: the index of env 0 among the run's envs (a worker process's share of
        them, :mod:`lzk_envs.workers`): env i is env ``first_index + i`` in seeds and messages."""
        if replay_from not in ("episode", "seed"):
            raise ValueError(f"replay_from must be 'episode' or 'seed', got {replay_from!r}")
        self.replay_from = replay_from
        self.env_id = env_id
        self.on_frame = on_frame
        self.num_envs = num_envs
        self.seed = seed
        self.obs_shape = obs_shape
        self.num_actions = num_actions
        self.make_env = make_env
        self.restarts = restarts
        self.first_index = first_index
        self.book = RestartBook(restarts, seed, num_envs, first_index)
        self._envs = [make_env(first_index + i) for i in range(num_envs)]
        self._seeded = False  # env i gets seed + first_index + i at its first reset only, then runs on
        self._env_seed = [seed + first_index + i for i in range(num_envs)]  # the seed env i last started from
        self._obs = np.zeros((num_envs, *obs_shape), np.float32)  # [E, *O]
        self._legal = np.ones((num_envs, num_actions), bool)  # [E, A]
        self._ret = np.zeros(num_envs, np.float64)  # [E] running episode return
        self._len = np.zeros(num_envs, np.int64)  # [E] running episode length
        self._started = False
        # Replay records (class docstring): env i's replay starts with reset(seed=_replay_seed[i])
        # (None: after restoring np_random to _replay_rng[i]) and steps _replay_actions[i].
        self._replay_seed: list[int | None] = [None] * num_envs
        self._replay_rng: list[dict[str, Any] | None] = [None] * num_envs
        self._replay_actions: list[array[int]] = [array("q") for _ in range(num_envs)]  # int64, compact

    # -- helpers ---------------------------------------------------------------------------------

    def _check_obs(self, i: int, obs: Any) -> np.ndarray:
        raw = np.asarray(obs) if not isinstance(obs, (str, bytes)) else None
        if raw is None or raw.dtype.kind not in "biuf":
            # Strings (even numeric-looking ones), objects, dicts: the env does not produce the
            # numeric Box observations it declared. A property of the env, so a config error.
            shown = repr(obs)
            raise ConfigError(
                f"env.id: {self._name(i)} returned an observation of type "
                f"{type(obs).__name__}{f' (dtype {raw.dtype})' if raw is not None else ''}: "
                f"{shown[:60] + ('...' if len(shown) > 60 else '')}; observations must be numeric arrays "
                f"of shape {self.obs_shape}")
        arr = raw.astype(np.float32, copy=False)
        if arr.shape != self.obs_shape:
            raise EnvError(
                f"{self._name(i)} returned an observation of shape "
                f"{arr.shape}, expected {self.obs_shape}"
            )
        if not np.isfinite(arr).all():
            # A finite float64 beyond float32's range (±3.4e38) becomes inf here: say so, not "non-finite".
            what = "a non-finite" if not np.isfinite(raw).all() else "a float32-overflowing (|x| > 3.4e38)"
            raise EnvError(f"{self._name(i)} returned {what} observation: {raw}")
        return arr

    def _check_reward(self, i: int, reward: Any) -> float:
        r = float(reward)
        if not np.isfinite(r):
            raise EnvError(f"{self._name(i)} returned a non-finite reward: {r}")
        return r

    def _mask(self, i: int, info: dict[str, Any]) -> np.ndarray:
        """Legal actions [A] of env i: ``info["action_mask"]`` when given, else all legal."""
        if "action_mask" not in info:
            return np.ones(self.num_actions, bool)
        mask = np.asarray(info["action_mask"]).astype(bool)
        if mask.shape != (self.num_actions,) or not mask.any():
            raise EnvError(
                f"{self._name(i)} gave info['action_mask'] "
                f"{np.asarray(info['action_mask'])!r}: expected shape ({self.num_actions},) with a legal action"
            )
        return mask

    def _render(self) -> np.ndarray:
        """Env 0's picture [H, W, 3] uint8; a ConfigError saying what to install when it cannot draw."""
        try:
            frame = self._envs[0].render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise ConfigError(f"gymnasium env {self.env_id!r} cannot render rgb_array frames: {exc}") from None
        arr = np.asarray(frame) if frame is not None else None
        if arr is None or arr.ndim != 3 or arr.shape[-1] != 3 or arr.dtype != np.uint8:
            raise ConfigError(f"gymnasium env {self.env_id!r} cannot render rgb_array frames (render() returned "
                              f"{type(frame).__name__}{'' if arr is None else f' {arr.dtype} {arr.shape}'}); "
                              "it needs render_mode='rgb_array' support")
        return arr

    def _name(self, i: int) -> str:
        """``gymnasium env 'ID' (env index I)``: env i as errors name it (I counts over the run's envs)."""
        return f"gymnasium env {self.env_id!r} (env index {self.first_index + i})"

    def _who(self, i: int, where: str, seed: int | None = None) -> str:
        """``gymnasium env 'ID' (env index i, seed S, <where>)``: what an env error is prefixed
        with; S is ``seed``, else the seed env i's episodes started from."""
        return (f"gymnasium env {self.env_id!r} (env index {self.first_index + i}, "
                f"seed {self._env_seed[i] if seed is None else seed}, {where})")

    def _reset_one(self, i: int) -> None:
        """Start env i's next episode (seeded with ``seed + i`` the first time)."""
        seed = self.seed + self.first_index + i if not self._seeded else None
        record = seed is not None or self.replay_from == "episode"  # a replay starts here
        rng = None if seed is not None or not record else generator_state(self._envs[i].unwrapped.np_random)
        try:
            obs, info = self._envs[i].reset(seed=seed)
        except LzkernelError:
            raise
        except Exception as exc:  # name the env: the run's one-line error would not say which
            where = "its first reset" if seed is not None else f"reset after step {self._len[i]} of its episode"
            self._recreate(i, exc, f"{self._who(i, where)} raised {type(exc).__name__} in reset(seed={seed}): {exc}")
            return
        if record:
            self._replay_seed[i], self._replay_rng[i], self._replay_actions[i] = seed, rng, array("q")
        self._begin(i, obs, info)

    def _begin(self, i: int, obs: Any, info: dict[str, Any]) -> None:
        """Env i's row holds the first state ``obs``, ``info`` of a new episode."""
        self._obs[i] = self._check_obs(i, obs)
        self._legal[i] = self._mask(i, info)
        self._ret[i] = 0.0
        self._len[i] = 0

    def _recreate(self, i: int, exc: Exception, what: str) -> None:
        """Env i raised ``exc`` (``what`` says where, naming it): make a new env and start its
        first episode from a restart seed, as often as ``self.book`` allows (a new env that
        raises while being made or reset is one more failure in a row); else EnvError."""
        while True:
            seed = self.book.fail(i, exc, what, EnvError)
            try:
                self._envs[i].close()
            except Exception:  # noqa: BLE001 - a broken env may fail to close too; it is dropped either way
                pass
            try:
                self._envs[i] = self.make_env(self.first_index + i)
                obs, info = self._envs[i].reset(seed=seed)
            except LzkernelError:
                raise
            except Exception as again:  # noqa: BLE001 - counted as one more failure in a row
                exc = again
                what = (f"{self._who(i, 'a new env', seed)} raised {type(again).__name__} while being made or "
                        f"reset: {again}")
                continue
            self._begin_restart(i, seed, obs, info)
            return

    def _begin_restart(self, i: int, seed: int, obs: Any, info: dict[str, Any]) -> None:
        """Env i's new env started from restart seed ``seed`` with ``obs``, ``info``: its replay
        starts there."""
        self._env_seed[i] = seed
        self._replay_seed[i], self._replay_rng[i], self._replay_actions[i] = seed, None, array("q")
        self._begin(i, obs, info)

    def start_anew(self, book: dict[str, Any], times: int = 1) -> StepBatch:
        """Start every env of this fresh vector env as a restart: the share of an env worker
        that was lost (:mod:`lzk_envs.workers`). ``book``: the restart counts
        (:meth:`RestartBook.state`) with the loss already counted; env i starts from the seed of
        its latest restart (a new env that raises is one more failure in a row, as in
        :meth:`step`). ``times``: the losses counted (each row's count in ``restarted``, besides
        any new env that raised here). The first states, as :meth:`reset` returns them."""
        self.book.load(book)
        for i in range(self.num_envs):
            seed = self.book.seed_of(i)
            try:
                obs, info = self._envs[i].reset(seed=seed)
            except LzkernelError:
                raise
            except Exception as exc:  # noqa: BLE001 - counted as one more failure in a row
                self._recreate(i, exc, f"{self._who(i, 'a new env', seed)} raised {type(exc).__name__} while being "
                                       f"made or reset: {exc}")
                continue
            self._begin_restart(i, seed, obs, info)
        self.book.recreated += times  # the losses themselves, counted in the book by the caller
        self._seeded = self._started = True
        return self._first_states()

    def _batch(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
               final_obs: np.ndarray, ep_ret: np.ndarray, ep_len: np.ndarray) -> StepBatch:
        return StepBatch(
            obs=self._obs.copy(),
            legal=self._legal.copy(),
            to_play=np.full(self.num_envs, -1, np.int64),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episode_return=ep_ret,
            episode_length=ep_len,
            restarted=self.book.take(),
        )

    def _first_states(self) -> StepBatch:
        """The rows as they stand, as :meth:`reset` returns them: rewards zero, no episode ended."""
        e = self.num_envs
        return self._batch(np.zeros(e, np.float32), np.zeros(e, bool), np.zeros(e, bool),
                           self._obs.copy(), np.zeros(e, np.float32), np.zeros(e, np.int64))

    # -- VectorEnv -------------------------------------------------------------------------------

    def reset(self) -> StepBatch:
        """Reset every env (env i seeded with ``seed + i`` the first time) and return the first
        states: rewards zero, no episode ended."""
        for i in range(self.num_envs):
            self._reset_one(i)
        self._seeded = self._started = True
        if self.on_frame is not None:
            self._render()  # fail now (nothing to install, no rgb_array) rather than after a step
        return self._first_states()

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> StepBatch:
        """Step the envs with ``actions`` [E] int (each legal for its row).

        ``active`` [E] bool (default all): rows that are False are not stepped; their row of the
        result repeats their current state with zero reward and no episode end (and their action
        is ignored). Where an episode ends, the row already holds the next episode's first state
        and ``final_obs`` / ``episode_return`` / ``episode_length`` describe the finished one.
        """
        if not self._started:
            raise RuntimeError(f"gymnasium env {self.env_id!r}: step() called before reset()")
        e = self.num_envs
        actions, active = check_step_args(f"gymnasium env {self.env_id!r}", e, actions, active)
        reward = np.zeros(e, np.float32)
        terminated = np.zeros(e, bool)
        truncated = np.zeros(e, bool)
        ep_ret = np.zeros(e, np.float32)
        ep_len = np.zeros(e, np.int64)
        final_obs = self._obs.copy()
        for i in np.flatnonzero(active):
            a = int(actions[i])
            if not (0 <= a < self.num_actions) or not self._legal[i, a]:
                raise ValueError(
                    f"{self._name(i)}: action {a} is not legal "
                    f"(num_actions={self.num_actions}, legal={np.flatnonzero(self._legal[i]).tolist()})"
                )
            try:
                obs, r, term, trunc, info = self._envs[i].step(a)
            except LzkernelError:
                raise
            except Exception as exc:  # name the env: the run's one-line error would not say which
                self._recreate(i, exc, f"{self._who(i, f'step {self._len[i] + 1} of its episode')} raised "
                                       f"{type(exc).__name__} in step({a}): {exc}")
                final_obs[i] = self._obs[i]  # the StepBatch contract: no episode ended in this row
                continue
            self._replay_actions[i].append(a)
            reward[i] = self._check_reward(i, r)
            final_obs[i] = self._obs[i] = self._check_obs(i, obs)
            if not (term or trunc):  # a final state's mask is never used, and may rightly be all False
                self._legal[i] = self._mask(i, info)
            self._ret[i] += reward[i]
            self._len[i] += 1
            terminated[i], truncated[i] = bool(term), bool(trunc)
            if i == 0 and self.on_frame is not None:
                self.on_frame(self._render(), bool(term or trunc))
            if term or trunc:  # same-step auto-reset: the row moves on to the next episode
                ep_ret[i], ep_len[i] = self._ret[i], self._len[i]
                self.book.episode_ended(i)
                self._reset_one(i)
        return self._batch(reward, terminated, truncated, final_obs, ep_ret, ep_len)

    # -- ResumableVectorEnv ----------------------------------------------------------------------

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Meta: per env the replay's start (seed or ``np_random`` state); arrays: the actions
        since (``actions`` [ΣT] int64, ``lengths`` [E]) and the state they lead to (``obs``
        [E, *O], ``legal`` [E, A], ``ret``, ``len`` [E])."""
        if not self._started:
            raise ValueError(f"gymnasium env {self.env_id!r}: state_dict() before reset()")
        meta = {"kind": "gymnasium", "env_id": self.env_id, "num_envs": self.num_envs, "seed": self.seed,
                "first_index": self.first_index,
                "replay_from": self.replay_from, "replay_seed": list(self._replay_seed),
                "replay_rng": list(self._replay_rng), "env_seed": list(self._env_seed),
                "restarts": self.book.state()}
        arrays = {"actions": np.concatenate([np.array(a, np.int64) for a in self._replay_actions]),
                  "lengths": np.array([len(a) for a in self._replay_actions], np.int64),
                  "obs": self._obs.copy(), "legal": self._legal.copy(), "ret": self._ret.copy(), "len": self._len.copy()}
        return meta, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepBatch:
        """Replay every env from its saved start on this (fresh) vector env; the current rows."""
        mine = {"kind": "gymnasium", "env_id": self.env_id, "num_envs": self.num_envs, "seed": self.seed,
                "replay_from": self.replay_from, "first_index": self.first_index}
        if {k: meta.get(k, 0 if k == "first_index" else None) for k in mine} != mine:
            raise ValueError(f"env state {({k: meta.get(k) for k in mine})} does not fit this vector env {mine}")
        ends = np.cumsum(arrays["lengths"])
        for i, env in enumerate(self._envs):
            seed, rng = meta["replay_seed"][i], meta["replay_rng"][i]
            if rng is not None:
                set_generator_state(env.unwrapped.np_random, rng)
            obs, info = env.reset(seed=seed)
            actions = arrays["actions"][ends[i] - arrays["lengths"][i]: ends[i]]
            for a in actions:
                obs, _, term, trunc, info = env.step(int(a))
                progressed()  # a long replay (Atari: the game since its seeded reset) is progress
                if term or trunc:  # replay_from="seed": the next episode of the same env
                    obs, info = env.reset()
            self._obs[i], self._legal[i] = self._check_obs(i, obs), self._mask(i, info)
            self._replay_seed[i], self._replay_rng[i] = seed, rng
            self._replay_actions[i] = array("q", actions.astype(np.int64).tobytes())
        check_restored(f"gymnasium env {self.env_id!r}", {"obs": self._obs, "legal": self._legal}, arrays, self.first_index)
        self._ret[:], self._len[:] = arrays["ret"], arrays["len"]
        # States saved before env restarts existed: no env had been recreated.
        self._env_seed = [int(x) for x in meta.get("env_seed", [self.seed + self.first_index + i
                                                                 for i in range(self.num_envs)])]
        self.book.load(meta.get("restarts"))
        # Envs an env-worker run restarted while saving (lzk_envs.workers): reported now, as restarted.
        self.book.recreated += np.asarray(meta.get("pending_restarts", np.zeros(self.num_envs)), np.int64)
        self._seeded = self._started = True
        return self._first_states()

    def close(self) -> None:
        """Close every env; one that fails to close (a broken env left by a failed restart) is
        logged, so that it neither stops the others closing nor hides the error being raised."""
        for i, env in enumerate(self._envs):
            try:
                env.close()
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("gymnasium env %r (env index %d) raised %s in close(): %s", self.env_id, i,
                            type(exc).__name__, exc)
