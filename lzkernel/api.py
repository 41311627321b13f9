"""The Python API: train, load and evaluate from a script or a notebook, as the CLI does.

::

    from lzkernel import api

    result = api.train("configs/cartpole_rezero.yaml", ["run.max_env_steps=5000"], out_dir="runs/nb")
    print(result.status, result.train_iter, result.best_eval)      # from the run's summary.json
    agent = api.load(result.run_dir, checkpoint="best")
    obs, _ = env.reset(seed=0)                                   # a gymnasium env of the same id
    agent.reset()                                                # an episode starts
    obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
    report = api.evaluate(result.run_dir, episodes=10)           # what `lzkernel eval` prints

:func:`train` is ``lzkernel run`` in this process: the same config checks (a config file, or a
mapping of the same shape), run directory, checkpoints, metrics and resume (``resume="auto"``);
errors are raised (:class:`lzkernel.ConfigError` for what the CLI exits 2 on) instead of exit
codes, and Ctrl-C stops the run with a checkpoint (``status`` "stopped"). It sets torch's thread
count to ``run.threads`` for this process, as the CLI does. :func:`load` restores a checkpoint's
policy as ``lzkernel eval`` does, wrapped in an :class:`Agent` that acts greedily on raw
observations (it stacks frames itself where the policy stacks them).

Shape letters: B observations, A actions, O the env's observation shape.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from lzkernel.errors import ConfigError
from lzkernel.frames import FrameWindow


@dataclass
class RunResult:
    """How a run that :func:`train` ran ended (its ``summary.json``)."""

    run_dir: Path
    status: str  # "finished" (a budget or a solved evaluation ended it), "stopped" (a signal), ...
    stop_reason: str | None  # in words, e.g. "solved: eval/return_mean 195.3 >= 195"
    train_iter: int
    env_steps: int
    best_eval: float | None  # the best evaluation's return_mean (None: no evaluation)
    summary: dict[str, Any] = field(repr=False)  # summary.json as written


def _kernel(plugins: Sequence[str], autoload: bool | None) -> Any:
    from lzkernel.pluginmanager import Kernel

    kernel = Kernel(list(plugins), autoload=autoload)
    kernel.raise_on_errors()
    return kernel


def train(config: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, out_dir: str | Path | None = None,
          resume: str | None = None, plugins: Sequence[str] = (), autoload: bool | None = None) -> RunResult:
    """Train as ``lzkernel run CONFIG OVERRIDES...`` does, in this process.

    ``config``: a YAML file, or a mapping with the file's sections (``run``, ``trainer``, ``env``,
    ...; complete, since a mapping extends no ``base:``; copied, never changed). ``overrides``: ``a.b=VALUE``, ``+a.b=VALUE``, ``~a.b``.
    ``out_dir``: sets ``run.out_dir``. ``resume``: ``"auto"`` (the run directory's last
    checkpoint, else a fresh start) or a checkpoint path. ``plugins`` / ``autoload``: as
    ``-p NAME`` / ``--disable-plugin-autoload`` (autoload False)."""
    from lzkernel.config.loader import config_from_tree, load_config
    from lzkernel.config.redact import check_unredacted

    kernel = _kernel(plugins, autoload)
    overrides = [*overrides, *([f"run.out_dir={json.dumps(str(out_dir))}"] if out_dir is not None else [])]
    if isinstance(config, Mapping):
        resolved = config_from_tree(dict(config), overrides, kernel.registry, "<mapping given to lzkernel.api.train>")
        argv = ["lzkernel.api.train(<mapping>)", *overrides]
    else:
        resolved = load_config(config, overrides, kernel.registry)
        argv = ["lzkernel", "run", str(config), *overrides]
    check_unredacted(resolved.to_dict(), f"the config {config if not isinstance(config, Mapping) else '(a mapping)'}")
    kernel.hook.lzkernel_configure(config=resolved.to_dict())

    from lzkernel.run import RunContext

    run = RunContext(kernel, resolved, resume=resume, overrides=overrides, argv=argv)
    with run:
        run.build("trainer").train()
    run_dir = Path(resolved.run.out_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    best = (summary.get("eval") or {}).get("best") or {}
    return RunResult(run_dir, str(summary.get("status")), summary.get("stop_reason"), int(summary.get("train_iter", 0)),
                     int(summary.get("env_steps", 0)), best.get("return_mean"), summary)


class Agent:
    """A trained policy that acts on observations: greedy (``mode="eval"``), by its own search.

    It serves up to ``num_envs`` envs, row i of a batch being env i: :meth:`reset` starts env i's
    episode (a frame-stacking policy's window is filled with the next observation; the
    policy's per-env state, e.g. UniZero's cache, is dropped), :meth:`act` takes the envs' raw
    observations. ``policy``, ``env_spec``, ``config`` and ``checkpoint`` are what was loaded."""

    def __init__(self, policy: Any, env_spec: Any, *, num_envs: int = 1, config: Any = None,
                 checkpoint: Path | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.policy, self.env_spec, self.config, self.checkpoint = policy, env_spec, config, checkpoint
        self.num_envs = num_envs
        self.obs_shape = tuple(env_spec.obs_shape)
        self.window = FrameWindow(num_envs, self.obs_shape, int(policy.target_spec.frame_stack))
        self._fresh = np.ones(num_envs, bool)  # [E] the env's next observation starts an episode
        self._timestep = np.zeros(num_envs, np.int64)  # [E] step within the episode

    def reset(self, env_ids: Sequence[int] | None = None) -> None:
        """Envs ``env_ids`` (default: all) start an episode."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise ValueError(f"env ids must be in 0..{self.num_envs - 1} (num_envs {self.num_envs}), got {ids.tolist()}")
        self._fresh[ids] = True
        self._timestep[ids] = 0
        self.policy.reset_envs(ids.tolist(), "eval")

    def act(self, obs: Any, legal: Any = None, to_play: Any = None, states: Sequence[Any] | None = None) -> Any:
        """Actions for observations ``obs`` [B, *O] (envs 0..B-1), or one observation [*O] (env 0;
        an int back). ``legal`` [B, A] bool (default: every action); ``to_play`` [B] (1 or 2 in
        two-player games, which need it; default -1); ``states``: simulator states, for policies
        that search with the game itself (AlphaZero)."""
        arr = np.asarray(obs, np.float32)
        single = arr.shape == self.obs_shape
        if single:
            arr = arr[None]
        if arr.shape[1:] != self.obs_shape or not 1 <= len(arr) <= self.num_envs:
            raise ValueError(f"observations of shape {tuple(np.asarray(obs).shape)}: expected {self.obs_shape} or "
                             f"[B, {', '.join(map(str, self.obs_shape))}] with B <= num_envs = {self.num_envs} "
                             f"(env {self.env_spec.id!r})")
        b, a = len(arr), int(self.env_spec.num_actions)
        ids = np.arange(b)
        mask = np.ones((b, a), bool) if legal is None else np.asarray(legal, bool).reshape(b, a)
        if to_play is None:
            if self.env_spec.two_player:
                raise ValueError(f"env {self.env_spec.id!r} is a two-player game: give to_play (1 or 2 per row)")
            players = np.full(b, -1, np.int64)
        else:
            players = np.asarray(to_play, np.int64).reshape(b)
        fresh = ids[self._fresh[ids]]
        going = ids[~self._fresh[ids]]
        self.window.reset(fresh, arr[fresh])
        self.window.push(going, arr[going])
        self._fresh[ids] = False
        res = self.policy.act(self.window.stacked(ids), mask, players, mode="eval", env_ids=ids, temperature=1.0,
                              epsilon=0.0, timestep=self._timestep[ids].copy(), states=states)
        self._timestep[ids] += 1
        actions = np.asarray(res.action, np.int64)
        return int(actions[0]) if single else actions


def load(target: str | Path, *, checkpoint: str = "last", overrides: Sequence[str] = (), num_envs: int = 1,
         plugins: Sequence[str] = (), autoload: bool | None = None) -> Agent:
    """The :class:`Agent` of a run directory's ``checkpoint`` (``last``, ``best`` or a path), or
    of a checkpoint directory, as ``lzkernel eval`` restores it; ``overrides`` apply to its config
    (e.g. ``policy.eval_num_simulations=100``)."""
    from lzkernel.evaluate import load_policy

    loaded = load_policy(_kernel(plugins, autoload), str(target), checkpoint=checkpoint, overrides=overrides)
    return Agent(loaded.policy, loaded.env_spec, num_envs=num_envs, config=loaded.config, checkpoint=loaded.checkpoint)


def evaluate(target: str | Path, *, checkpoint: str = "last", overrides: Sequence[str] = (), episodes: int | None = None,
             seed: int | None = None, plugins: Sequence[str] = (), autoload: bool | None = None) -> dict[str, Any]:
    """``lzkernel eval``'s report (``metrics`` holds ``eval/return_mean`` and the rest): one
    evaluation of the checkpoint's policy with the run's evaluator (without ``seed``, the
    checkpoint's last evaluation replayed; ``episodes``: episodes, or games per side)."""
    from lzkernel.evaluate import evaluate as run_evaluation

    if episodes is not None and episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    return run_evaluation(_kernel(plugins, autoload), str(target), checkpoint=checkpoint, overrides=overrides,
                          episodes=episodes, seed=seed)
