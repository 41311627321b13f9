"""The Python API: train, load and evaluate from a script or a notebook, as the CLI does.

::

    from lzkernel import api

    result = api.train("configs/cartpole_rezero.yaml", ["run.max_env_steps=5000"], out_dir="runs/nb")
    print(result.status, result.train_iter, result.best_eval)      # how it ended, its best evaluation
    agent = api.load(result.run_dir, checkpoint="best")
    obs, _ = env.reset(seed=0)                                   # a gymnasium env of the same id
    agent.reset()                                                # an episode starts
    obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
    report = api.evaluate(result.run_dir, episodes=10)           # what `lzkernel eval` prints
    reports = [api.evaluate(r) for r in api.runs("runs/sweep")]  # a sweep's runs, one by one

:func:`train` is ``lzkernel run`` in this process: the same config checks (a config file, or a
mapping of the same shape), run directory, checkpoints, metrics and resume (``resume="auto"``);
errors are raised (:class:`lzkernel.ConfigError` for what the CLI exits 2 on, a full disk
included) instead of exit codes, with the config's secrets scrubbed from their messages and
causes. Ctrl-C stops the run with a checkpoint and then raises KeyboardInterrupt (a second
Ctrl-C interrupts it at once; the process lives on); SIGTERM stops it with a checkpoint and
``status`` "stopped". The stall watchdog (``run.stall_timeout_s``) raises
:class:`lzkernel.Stalled` in the run's thread as soon as that thread runs Python code again (a
call blocked in C returns first), and the run fails with it. Ctrl-C's save needs the main
thread (signal handlers live there); from another thread a run trains, without them. Like the CLI, a run sets process-wide state: torch's thread count
(``run.threads``), the global RNGs' seeds, deterministic algorithms (``run.deterministic``).
:func:`load` restores a checkpoint's policy as ``lzkernel eval`` does, wrapped in an
:class:`Agent` that acts greedily on raw observations (it stacks frames itself where the policy
stacks them). The observations are the env spec's: a gymnasium env of the same id gives them for
``gymnasium`` configs; for Atari and OpenSpiel use ``agent.env_spec.make_vector(n, seed)``.

Shape letters: B observations, A actions, O the env's observation shape.
"""
from __future__ import annotations

import json
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from lzkernel.errors import ConfigError, describe_storage_error, storage_error
from lzkernel.frames import FrameWindow, decode_frames
from lzkernel.roles.env import FrameEnvSpec


@dataclass
class RunResult:
    """How a run that :func:`train` ran ended."""

    run_dir: Path
    status: str  # "finished" (solved, or a budget reached) or "stopped" (a signal, a request)
    stop_reason: str | None  # in words, e.g. "solved: eval/return_mean 195.3 >= 195"
    stop_kind: str | None  # "solved", "max_env_steps", "signal", ... (lzkernel.run.StopKind)
    train_iter: int
    env_steps: int
    best_eval: float | None  # the best eval/return_mean of the run's history (None: none logged)
    last_checkpoint: Path | None  # the newest checkpoint this call saved
    summary: dict[str, Any] | None  # the summary.json this call wrote (None: no summary sink)


@contextmanager
def _scrubbed() -> Iterator[None]:
    """Errors leave with the config's secret values scrubbed from their message, as the CLI
    prints them (:mod:`lzkernel.config.redact`)."""
    from lzkernel.config.redact import scrub

    try:
        yield
    except BaseException as exc:
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:  # the exception and its causes, as a traceback shows them
            seen.add(id(e))
            e.args = tuple(scrub(a) if isinstance(a, str) else a for a in e.args)
            if isinstance(e, ConfigError):  # its lines, and the details --traceback shows
                e.problems, e.details = [scrub(line) for line in e.problems], scrub(e.details)
            e = e.__cause__ or e.__context__
        raise


def _kernel(plugins: Sequence[str], autoload: bool | None) -> Any:
    from lzkernel.pluginmanager import Kernel

    kernel = Kernel(list(plugins), autoload=autoload)
    kernel.raise_on_errors()
    return kernel


def plain(value: Any, where: str = "") -> Any:
    """``value`` (a config mapping given to :func:`train`) as YAML's plain types: mappings →
    dicts, lists and tuples → lists, paths → strings, numpy scalars → Python numbers; a
    ConfigError naming the dotted key of anything else."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{where or 'the mapping'}: keys must be strings, got {key!r}")
            out[key] = plain(item, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, (list, tuple)):
        return [plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise ConfigError(f"{where}: a config value must be a string, number, boolean, null, list or mapping, "
                      f"got {type(value).__name__} {value!r}")


def train(config: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, out_dir: str | Path | None = None,
          resume: str | None = None, plugins: Sequence[str] = (), autoload: bool | None = None) -> RunResult:
    """Train as ``lzkernel run CONFIG OVERRIDES...`` does, in this process.

    ``config``: a YAML file, or a mapping with the file's sections (``run``, ``trainer``, ``env``,
    ...; copied, never changed; complete, since a mapping extends no ``base:``, so
    ``lzkernel.config.loader.load_tree(path)[0]`` is a file's with its bases merged).
    ``overrides``: ``a.b=VALUE``, ``+a.b=VALUE``, ``~a.b``. ``out_dir``: sets ``run.out_dir``. ``resume``: ``"auto"`` (the run directory's last
    checkpoint, else a fresh start) or a checkpoint path. ``plugins`` / ``autoload``: as
    ``-p NAME`` / ``--disable-plugin-autoload`` (autoload False)."""
    with _scrubbed():
        return _train(config, overrides, out_dir, resume, plugins, autoload)


def _train(config: str | Path | Mapping[str, Any], overrides: Sequence[str], out_dir: str | Path | None,
           resume: str | None, plugins: Sequence[str], autoload: bool | None) -> RunResult:
    from lzkernel.config.loader import config_from_tree, load_config
    from lzkernel.config.redact import check_unredacted

    started = time.time()
    kernel = _kernel(plugins, autoload)
    overrides = [*overrides, *([f"run.out_dir={json.dumps(str(out_dir))}"] if out_dir is not None else [])]
    if isinstance(config, Mapping):
        resolved = config_from_tree(plain(config), overrides, kernel.registry, "<mapping given to lzkernel.api.train>")
        head = ["lzkernel.api.train(<mapping>)"]
    else:
        resolved = load_config(config, overrides, kernel.registry)
        head = ["lzkernel", "run", str(config)]
    from argparse import Namespace

    from lzkernel.cli import plugin_argv

    options = [*plugin_argv(Namespace(plugins=list(plugins), disable_plugin_autoload=autoload is False)),
               *(["--resume", resume] if resume is not None else [])]
    check_unredacted(resolved.to_dict(), f"the config {config if not isinstance(config, Mapping) else '(a mapping)'}")
    kernel.hook.lzkernel_configure(config=resolved.to_dict())

    from lzkernel.run import INTERRUPTED_KINDS, RunContext

    run = RunContext(kernel, resolved, resume=resume, overrides=overrides, argv=[*head, *overrides, *options],
                     embedded=True)
    run_trainer(run)
    run_dir = Path(resolved.run.out_dir)
    if run.stop_signal == signal.SIGINT:
        where = f"saved in {run.last_checkpoint}; " if run.last_checkpoint is not None else ""
        raise KeyboardInterrupt(f"the run in {run_dir} stopped at train_iter {run.train_iter} on Ctrl-C ({where}"
                                "continue with resume='auto')")
    return RunResult(run_dir, "stopped" if run.stop_signal is not None or run.stop_kind in INTERRUPTED_KINDS
                     else "finished", run.stop_reason, run.stop_kind, run.train_iter, run.env_steps,
                     _best_eval(run_dir), run.last_checkpoint, _summary_since(run_dir, started))


def run_trainer(run: Any) -> None:
    """Run ``run`` (a :class:`lzkernel.run.RunContext` not started yet): its trainer from start to
    end, inside the run context. An error that says a path cannot be written (a full disk: its
    cause chain holds the OSError) becomes a ConfigError naming the path; every other error is
    raised as it is (``lzkernel run`` and :func:`train` share this)."""
    try:
        with run:
            run.build("trainer").train()
    except Exception as exc:
        storage = storage_error(exc)
        if storage is None or isinstance(exc, ConfigError):
            raise
        raise ConfigError(describe_storage_error(storage, run.cfg.out_dir)) from exc


def _best_eval(run_dir: Path) -> float | None:
    """The best ``eval/return_mean`` of the run's live history (None: none, or no metrics.jsonl)."""
    from lzkernel.runinfo import eval_history, eval_returns

    return max(map(float, eval_returns(eval_history(run_dir))), default=None)


def _summary_since(run_dir: Path, started: float) -> dict[str, Any] | None:
    """``summary.json`` when written since ``started`` (by this call, not an earlier run)."""
    path = run_dir / "summary.json"
    try:
        if path.stat().st_mtime >= started - 1.0:  # a coarse filesystem clock
            return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    return None


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

    def act(self, obs: Any, legal: Any = None, to_play: Any = None, states: Any = None,
            env_ids: Sequence[int] | None = None) -> Any:
        """Actions [B] for observations ``obs`` [B, *O] of envs ``env_ids`` (default 0..B-1), or
        one action (an int) for one observation [*O] (env 0 unless ``env_ids`` names one).
        Frames may come as the env's float32 or as uint8 (decoded at the env's ``frame_scale``).
        ``legal`` [B, A] (or [A]) bool mask (default: every action); ``to_play`` [B] (1 or 2 in
        two-player games, which need it; default -1); ``states``: simulator states, for policies
        that search with the game itself (AlphaZero)."""
        raw = np.asarray(obs)
        single = raw.shape == self.obs_shape
        arr = raw[None] if single else raw
        ids = np.arange(len(arr)) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
        if (arr.shape[1:] != self.obs_shape or len(ids) != len(arr) or not len(ids)
                or ids.min() < 0 or ids.max() >= self.num_envs or len(set(ids.tolist())) != len(ids)):
            raise ValueError(f"observations of shape {raw.shape} for env ids {ids.tolist()}: expected {self.obs_shape} "
                             f"or [B, {', '.join(map(str, self.obs_shape))}], one row per env id, distinct ids in "
                             f"0..{self.num_envs - 1} (num_envs; env {self.env_spec.id!r})")
        if arr.dtype == np.uint8 and isinstance(self.env_spec, FrameEnvSpec):
            arr = decode_frames(arr, float(self.env_spec.frame_scale))
        arr = arr.astype(np.float32, copy=False)
        b, a = len(arr), int(self.env_spec.num_actions)
        mask = self._mask(legal, b, a)
        if to_play is None:
            if self.env_spec.two_player:
                raise ValueError(f"env {self.env_spec.id!r} is a two-player game: give to_play (1 or 2 per row)")
            players = np.full(b, -1, np.int64)
        else:
            players = np.asarray(to_play, np.int64).reshape(b)
        if single and states is not None and not isinstance(states, (list, tuple)):
            states = [states]
        saved = self.window.frames[ids].copy(), self._fresh[ids].copy()  # put back if the policy raises
        fresh, going = ids[self._fresh[ids]], ids[~self._fresh[ids]]
        self.window.reset(fresh, arr[self._fresh[ids]])
        self.window.push(going, arr[~self._fresh[ids]])
        self._fresh[ids] = False
        try:
            res = self.policy.act(self.window.stacked(ids), mask, players, mode="eval", env_ids=ids, temperature=1.0,
                                  epsilon=0.0, timestep=self._timestep[ids].copy(), states=states)
        except BaseException:
            self.window.frames[ids], self._fresh[ids] = saved
            raise
        self._timestep[ids] += 1
        actions = np.asarray(res.action, np.int64)
        return int(actions[0]) if single else actions

    def _mask(self, legal: Any, b: int, a: int) -> np.ndarray:
        """``legal`` as a [b, a] bool mask: a bool or 0/1 array of shape [a] or [b, a] (not a
        list of action indices); every action when None."""
        if legal is None:
            return np.ones((b, a), bool)
        arr = np.asarray(legal)
        if arr.shape not in ((a,), (b, a)) or (arr.dtype != bool and not np.isin(arr, (0, 1)).all()):
            raise ValueError(f"legal must be a bool mask of shape [{a}] or [{b}, {a}] (a True per legal action, not "
                             f"a list of action indices), got shape {arr.shape} dtype {arr.dtype}")
        mask = np.broadcast_to(arr.astype(bool), (b, a)).copy()
        if not mask.any(axis=1).all():
            raise ValueError("legal: every row needs at least one legal action")
        return mask


def runs(target: str | Path) -> list[Path]:
    """The run directories in ``target``: a sweep's runs (``--seeds``/``--grid``), in the order
    they ran, else ``[target]`` itself: what ``lzkernel eval``/``status``/``plot`` expand a
    sweep's directory to. ``[api.evaluate(r) for r in api.runs(sweep)]`` evaluates a sweep."""
    from lzkernel.sweep import sweep_runs

    return sweep_runs(Path(target)) or [Path(target)]


def _one_run(target: str | Path, call: str) -> str | Path:
    """``target``, or the one run of a sweep's directory holding one run (as ``lzkernel eval``
    takes it); a sweep's directory with several runs is the ConfigError that says what to do."""
    found = runs(target)
    if found == [Path(target)]:
        return target
    if len(found) == 1:
        return found[0]
    raise ConfigError(f"{target} is a sweep's directory ({len(found)} runs): {call} takes one run's; "
                      f"loop over lzkernel.api.runs({str(target)!r}), e.g. {found[0]}")


def load(target: str | Path, *, checkpoint: str = "last", overrides: Sequence[str] = (), num_envs: int = 1,
         plugins: Sequence[str] = (), autoload: bool | None = None) -> Agent:
    """The :class:`Agent` of a run directory's ``checkpoint`` (``last``, ``best`` or a path), or
    of a checkpoint directory, as ``lzkernel eval`` restores it; ``overrides`` apply to its config
    (e.g. ``policy.eval_num_simulations=100``)."""
    from lzkernel.evaluate import load_policy

    target = _one_run(target, "load")
    with _scrubbed():
        loaded = load_policy(_kernel(plugins, autoload), str(target), checkpoint=checkpoint, overrides=overrides)
    return Agent(loaded.policy, loaded.env_spec, num_envs=num_envs, config=loaded.config, checkpoint=loaded.checkpoint)


def evaluate(target: str | Path, *, checkpoint: str = "last", overrides: Sequence[str] = (), episodes: int | None = None,
             seed: int | None = None, video: str | Path | None = None, video_episodes: int = 1,
             plugins: Sequence[str] = (), autoload: bool | None = None) -> dict[str, Any]:
    """``lzkernel eval``'s report (``metrics`` holds ``eval/return_mean`` and the rest): one
    evaluation of the checkpoint's policy with the run's evaluator (without ``seed``, the
    checkpoint's last evaluation replayed; ``episodes``: episodes, or games per side;
    ``video``: a .mp4 or .gif of env 0's first ``video_episodes`` episodes, as ``--video``)."""
    from lzkernel.evaluate import evaluate as run_evaluation

    if episodes is not None and episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    if video is None and video_episodes != 1:
        raise ConfigError(f"video_episodes {video_episodes} needs video (a .mp4 or .gif path)")
    target = _one_run(target, "evaluate")
    with _scrubbed():
        return run_evaluation(_kernel(plugins, autoload), str(target), checkpoint=checkpoint, overrides=overrides,
                              episodes=episodes, seed=seed, video=None if video is None else str(video),
                              video_episodes=video_episodes)
