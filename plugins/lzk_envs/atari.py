"""Atari through ale-py with LightZero's preprocessing (SPEC-atari-efficientzero §A), one env per game.

The chain of :class:`AtariEnv` (LightZero's ``wrap_lightzero``, innermost first):

1. no-op starts: after a real reset, k NOOP raw frames with k uniform in 1..``noop_max`` (drawn
   from the env's own seeded RNG, not numpy's global one); a game that ends during them resets;
2. frame skip: the action repeats for ``frame_skip`` raw frames (stopping at a game end), the raw
   rewards are summed, and the observation is the pixelwise max of the last two raw frames;
3. episodic life (``episode_life``, collection only): losing a life ends the episode; the next
   reset then continues the game with one NOOP agent step instead of restarting it;
4. time limit: ``max_episode_steps`` agent steps since the last reset truncate the episode;
5. warp: RGB → grayscale (ITU-R 601 weights, as OpenCV) unless ``gray_scale`` is off, then an
   area-averaging resize to ``frame_size`` × ``frame_size`` (OpenCV's INTER_AREA), as uint8;
6. scale: observations are ``decode_frames(frame, 255)`` in [0, 1], float32, [C, H, W];
7. reward clipping (``clip_rewards``, collection only): the sign of the summed reward.

Frame stacking is not the env's job: the policy's ``frame_stack`` stacks frames (collectors'
frame windows, the replay buffer at sampling time), as in LightZero. Decisions against LightZero:
the env is seeded once (LightZero reseeds, and so reloads the ROM, at every reset: SPEC §A.5
[BUG?], which restarts the game after every lost life in collection), and frames are C×H×W with
H and W in that order (LightZero swaps them for non-square sizes: §A.2 [BUG?]).

Shape letters: C channels (1 gray, 3 RGB), H = W = ``frame_size``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import gymnasium
import numpy as np

from lzkernel import ConfigError, FrameCallback, decode_frames
from lzk_envs.restarts import EnvRestarts

FRAME_SCALE = 255.0
#: ITU-R BT.601 luma weights (OpenCV's RGB2GRAY) for R, G, B.
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)


@dataclass(frozen=True)
class AtariSettings:
    """Everything that shapes one Atari env (see the module docstring for each step)."""

    game: str
    frame_size: int = 64
    gray_scale: bool = True
    frame_skip: int = 4
    noop_max: int = 30
    sticky_action_prob: float = 0.0
    full_action_space: bool = False
    episode_life: bool = True
    clip_rewards: bool = True
    max_episode_steps: int = 108_000
    max_episode_frames: int = 108_000


@lru_cache(maxsize=16)
def _area_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """An area-averaging resize along one axis as taps: output pixel i averages the input pixels
    over [i·n_in/n_out, (i+1)·n_in/n_out), each weighted by its overlap (OpenCV's INTER_AREA).
    Returns (index [k, n_out] int64, weight [k, n_out] float32), k the most pixels one output spans.

    Taps rather than a weight matrix: BLAS threads make a [64, 210] matmul ~15x slower on a
    loaded machine, and each output pixel touches only a handful of inputs anyway."""
    ratio = n_in / n_out
    lo = np.arange(n_out) * ratio  # [n_out]
    k = int(np.ceil(ratio)) + 1
    idx = np.floor(lo)[None, :].astype(np.int64) + np.arange(k)[:, None]  # [k, n_out]
    overlap = np.minimum(lo + ratio, idx + 1) - np.maximum(lo, idx)
    weight = np.where(idx < n_in, np.clip(overlap, 0.0, None), 0.0) / ratio
    return np.minimum(idx, n_in - 1), weight.astype(np.float32)


def _resize_axis(x: np.ndarray, axis: int, n_out: int) -> np.ndarray:
    """Area-resize ``x`` (float32) along ``axis`` to ``n_out`` pixels."""
    idx, weight = _area_taps(x.shape[axis], n_out)
    shape = [1] * x.ndim
    shape[axis] = n_out
    out = np.zeros(x.shape[:axis] + (n_out,) + x.shape[axis + 1:], np.float32)
    for j in range(idx.shape[0]):
        out += np.take(x, idx[j], axis=axis) * weight[j].reshape(shape)
    return out


def warp_frame(rgb: np.ndarray, size: int, gray: bool) -> np.ndarray:
    """An RGB screen [h, w, 3] uint8 → the preprocessed frame [C, size, size] uint8 (C = 1 gray, 3 RGB)."""
    x = rgb.astype(np.float32)
    if gray:
        planes = (x[..., 0] * _LUMA[0] + x[..., 1] * _LUMA[1] + x[..., 2] * _LUMA[2])[None]  # [1, h, w]
    else:
        planes = np.moveaxis(x, -1, 0)  # [3, h, w]
    out = _resize_axis(_resize_axis(planes, 1, size), 2, size)  # [C, size, size]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _load_ale(settings: AtariSettings) -> Any:
    """ale-py's gymnasium env of ``settings.game`` with frame skip 1 (we skip), rgb screens."""
    try:
        from ale_py.env import AtariEnv as AleEnv
    except ImportError as exc:
        raise ConfigError("env 'atari' needs ale-py (it ships the ROMs): pip install 'lzkernel[atari]' "
                          f"or pip install ale-py ({exc})") from None
    try:
        return AleEnv(game=settings.game, obs_type="rgb", frameskip=1,
                      repeat_action_probability=settings.sticky_action_prob,
                      full_action_space=settings.full_action_space,
                      max_num_frames_per_episode=settings.max_episode_frames, render_mode="rgb_array")
    except Exception as exc:  # noqa: BLE001 - ale-py raises several types for an unknown ROM
        raise ConfigError(f"env.game: ale-py cannot load game {settings.game!r} ({exc}); use a ROM name such as "
                          "pong, breakout, ms_pacman, seaquest") from None


class AtariEnv(gymnasium.Env):
    """One Atari game with LightZero's preprocessing (module docstring); a gymnasium env, so
    :class:`lzk_envs.gym.GymVectorEnv` vectorises it like any other."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, settings: AtariSettings) -> None:
        self.settings = settings
        self.ale_env = _load_ale(settings)
        self.ale = self.ale_env.unwrapped.ale
        c = 1 if settings.gray_scale else 3
        self.action_space = self.ale_env.action_space
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (c, settings.frame_size, settings.frame_size), np.float32)
        self.render_mode = "rgb_array"
        self._lives = 0
        self._game_over = True  # the next reset restarts the game (not just the next life)
        self._steps = 0

    def _observe(self, screen: np.ndarray) -> np.ndarray:
        s = self.settings
        return decode_frames(warp_frame(screen, s.frame_size, s.gray_scale), FRAME_SCALE)

    def _skip(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        """Repeat ``action`` for ``frame_skip`` raw frames: (max of the last two screens, summed
        reward, game terminated, game truncated by ALE's frame cap)."""
        total, last, prev = 0.0, None, None
        term = trunc = False
        for _ in range(self.settings.frame_skip):
            screen, r, term, trunc, _ = self.ale_env.step(action)
            total += float(r)
            prev, last = last, screen
            if term or trunc:
                break
        assert last is not None
        return (last if prev is None else np.maximum(prev, last)), total, bool(term), bool(trunc)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        # Episodic life: after a lost life (or any end short of game over) the game goes on, as
        # LightZero's EpisodicLifeEnv; a reset with a seed, or without episodic life, starts anew.
        if self.settings.episode_life and not self._game_over and seed is None:
            screen, _, term, trunc = self._skip(0)
            self._lives = self.ale.lives()
            if not (term or trunc):
                return self._observe(screen), {"lives": self._lives}
        screen = self._restart(seed)
        self._game_over = False
        self._lives = self.ale.lives()
        return self._observe(screen), {"lives": self._lives}

    def _restart(self, seed: int | None) -> np.ndarray:
        """A real reset followed by the no-op start; returns the last raw screen."""
        ale_seed = None if seed is None else int(self.np_random.integers(2**31))
        while True:
            screen, _ = self.ale_env.reset(seed=ale_seed)
            ale_seed = None
            over = False
            for _ in range(int(self.np_random.integers(1, self.settings.noop_max + 1)) if self.settings.noop_max else 0):
                screen, _, term, trunc, _ = self.ale_env.step(0)
                if term or trunc:
                    over = True
                    break
            if not over:
                return screen

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        s = self.settings
        screen, reward, term, trunc = self._skip(int(action))
        self._game_over = term or trunc
        lives = self.ale.lives()
        if s.episode_life and 0 < lives < self._lives:
            term = True  # a lost life ends the training episode; the game goes on at the next reset
        self._lives = lives
        self._steps += 1
        if self._steps >= s.max_episode_steps:
            trunc = True
            self._game_over = True  # LightZero's TimeLimit resets the game
        if s.clip_rewards:
            reward = float(np.sign(reward))
        return self._observe(screen), reward, term, trunc, {"lives": lives}

    def render(self) -> np.ndarray:
        """The raw RGB screen [210, 160, 3] uint8 of the last raw frame."""
        return self.ale_env.render()

    def close(self) -> None:
        self.ale_env.close()


@dataclass
class AtariEnvSpec:
    """An :class:`~lzkernel.EnvSpec` of one Atari game; also a :class:`~lzkernel.FrameEnvSpec`
    (uint8 frames at scale 255), an :class:`~lzkernel.EvalVariantEnvSpec` (evaluation: no
    episodic life, no reward clipping, as LightZero's evaluator envs) and a
    :class:`~lzkernel.RenderableEnvSpec`."""

    settings: AtariSettings
    id: str = ""
    obs_shape: tuple[int, ...] = ()
    num_actions: int = 0
    truncation_as_terminal: bool = True
    two_player: bool = False
    frame_scale: float = FRAME_SCALE
    render_fps: float = 15.0
    action_meanings: tuple[str, ...] = field(default=())
    restarts: EnvRestarts = EnvRestarts()
    workers: int = 0  # env worker processes (lzk_envs.workers); 0: the envs run in this process
    step_timeout_s: float = 60.0

    @classmethod
    def probe(cls, settings: AtariSettings, truncation_as_terminal: bool = True, restarts: EnvRestarts = EnvRestarts(),
              workers: int = 0, step_timeout_s: float = 60.0) -> AtariEnvSpec:
        """Load the ROM once to read the action set; ConfigError for a missing ale-py or ROM."""
        env = AtariEnv(settings)
        try:
            meanings = tuple(env.ale_env.unwrapped.get_action_meanings())
            obs_shape = tuple(int(d) for d in env.observation_space.shape)
        finally:
            env.close()
        return cls(settings=settings, id=f"atari/{settings.game}", obs_shape=obs_shape, num_actions=len(meanings),
                   truncation_as_terminal=truncation_as_terminal, render_fps=60.0 / settings.frame_skip,
                   action_meanings=meanings, restarts=restarts, workers=workers, step_timeout_s=step_timeout_s)

    def eval_variant(self) -> AtariEnvSpec:
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, episode_life=False,
                                                                      clip_rewards=False))

    def make_vector(self, num_envs: int, seed: int) -> Any:
        """``num_envs`` envs; env i is seeded with ``seed + i`` at its first reset; in
        ``workers`` processes when set (:mod:`lzk_envs.workers`)."""
        from lzk_envs.workers import make_vector

        return make_vector(self, num_envs, seed)

    def make_local_vector(self, num_envs: int, seed: int, first_index: int = 0) -> Any:
        """Envs ``first_index`` .. ``first_index + num_envs - 1`` of the run, in this process."""
        return self._vector(num_envs, seed, None, first_index)

    def make_rendering_vector(self, num_envs: int, seed: int, on_frame: FrameCallback) -> Any:
        return self._vector(num_envs, seed, on_frame)

    def _vector(self, num_envs: int, seed: int, on_frame: FrameCallback | None, first_index: int = 0) -> Any:
        from lzk_envs.gym import GymVectorEnv

        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        # The lives of one game are episodes that share the emulator: a restored env replays its
        # whole history since the seeded first reset (see GymVectorEnv).
        return GymVectorEnv(self.id, lambda i: AtariEnv(self.settings), num_envs, seed, self.obs_shape,
                            self.num_actions, on_frame=on_frame, replay_from="seed",
                            restarts=self.restarts if on_frame is None else EnvRestarts(),  # as gym's video envs
                            first_index=first_index)
