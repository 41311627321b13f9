"""``lzkernel eval RUN_DIR_OR_CHECKPOINT``: play a trained policy, report returns, record a video.

Loads the resolved config a checkpoint was written with (plus command-line overrides), builds the
env, the policy and the run's evaluator through the registry exactly as the trainer does
(:class:`lzkernel.run.RunContext`'s ``build``, without starting a run: nothing is written into the
run directory and no lock is taken, so a running training can be evaluated), loads the policy's
state from ``state["trainer"]["policy"]`` (``torch.load(weights_only=True)``), and plays one
evaluation.

**Replay.** Evaluations are reproducible (:class:`lzkernel.ReplayableEvaluator`): evaluation n
plays envs seeded from the run seed and n. By default the evaluation replayed is the last one
the checkpoint's evaluator state counts; ``ckpt/best`` is written right after the evaluation it
is best for, so ``lzkernel eval RUN --checkpoint best`` plays that evaluation's episodes with
its weights and gives the return recorded in ``metrics.jsonl`` (``eval/index``), exactly.
``--seed S`` (the same as the override ``run.seed=S``) plays other episodes.
"""
from __future__ import annotations

import json
import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lzkernel.config.redact import check_unredacted
from lzkernel.errors import CheckpointError, ConfigError
from lzkernel.roles.env import EvalVariantEnvSpec, FrameCallback, RenderableEnvSpec
from lzkernel.roles.workers import ReplayableEvaluator

log = logging.getLogger("lzkernel")


def find_checkpoint(target: str, which: str) -> tuple[Path, Path | None]:
    """(checkpoint directory, run directory or None) for ``target`` (a run directory or a
    checkpoint) and ``which`` (``last``, ``best`` or a path)."""
    from lzkernel.checkpoint import CheckpointStore

    path = Path(target)
    if not path.exists():
        raise ConfigError(f"{target}: no such run directory or checkpoint")
    if (path / "state.pt").is_file() or (path / "DONE").is_file():  # a checkpoint itself
        run_dir = path.parent.parent if path.parent.name == "ckpt" else None
        return path, run_dir
    if not (path / "ckpt").is_dir():
        raise ConfigError(f"{target}: not a run directory (no ckpt/) nor a checkpoint (no state.pt); "
                          "pass the run.out_dir of a training run or one of its ckpt/* directories")
    if which == "last":
        ckpt = CheckpointStore(path / "ckpt").latest()
        if ckpt is None:
            raise ConfigError(f"{target}: no complete checkpoint in {path / 'ckpt'} (the run wrote none yet: "
                              "run.checkpoint_every sets how often); try --checkpoint best")
        return ckpt, path
    ckpt = path / "ckpt" / "best" if which == "best" else Path(which)
    if not ckpt.is_dir():
        hint = "the run has not evaluated yet" if which == "best" else "pass last, best or a checkpoint directory"
        raise ConfigError(f"--checkpoint {which}: no checkpoint at {ckpt} ({hint})")
    return ckpt, path


class _RenderingSpec:
    """The evaluation env spec with env 0 drawing into ``on_frame``: what the evaluator makes its
    envs from during ``--video``. Other attributes are the wrapped (evaluation) spec's."""

    def __init__(self, spec: Any, on_frame: FrameCallback) -> None:
        self._spec, self._on_frame = spec, on_frame

    def __getattr__(self, name: str) -> Any:
        if name == "eval_variant":  # already applied: the evaluator must not apply it again
            raise AttributeError(name)
        return getattr(self._spec, name)

    def make_vector(self, num_envs: int, seed: int) -> Any:
        return self._spec.make_rendering_vector(num_envs, seed, self._on_frame)


def recorded_evaluation(run_dir: Path | None, index: int) -> dict[str, Any] | None:
    """The ``metrics.jsonl`` record of evaluation ``index`` (the last one with that index), or None."""
    if run_dir is None or not (run_dir / "metrics.jsonl").is_file():
        return None
    found = None
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if rec.get("event") == "eval" and rec.get("eval/index") == index:
                found = rec
    return found


def _episode_override(options: Any, episodes: int) -> str:
    for key in ("episodes", "games"):
        if hasattr(options, key):
            return f"evaluator.{key}={episodes}"
    raise ConfigError(f"--episodes: evaluator '{type(options).__name__}' has no episodes or games option; "
                      "set its options with overrides instead")


#: The statistics of an evaluation's returns an evaluator logs as ``eval/return_<stat>``.
RETURN_STATS = ("mean", "std", "min", "max")


def _missing_plugins(kernel: Any, ckpt: Path) -> str:
    """What the checkpoint's run had loaded (its meta's ``versions``) that is not loaded now, and
    how to load it: ``"my_env is not loaded now (add -p my_env); "``; "" when none or unknown.
    A plugin blocked with ``-p no:NAME`` is named as blocked."""
    try:
        plugins = json.loads((ckpt / "meta.json").read_text(encoding="utf-8"))["versions"]["plugins"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    gone = sorted(name for name in plugins if name not in kernel.infos)
    if not gone:
        return ""
    blocked = [n for n in gone if n in kernel.blocked]
    absent = [n for n in gone if n not in kernel.blocked]
    parts = [f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not loaded now (add "
             + " ".join(f"-p {n}" for n in absent) + ")"] if absent else []
    parts += [f"{', '.join(blocked)} {'is' if len(blocked) == 1 else 'are'} blocked (-p no:...)"] if blocked else []
    return "; ".join(parts) + "; "


def checkpoint_config(kernel: Any, ckpt: Path, overrides: Sequence[str]) -> Any:
    """The config a checkpoint was written with, plus ``overrides``, validated against the
    plugins installed now."""
    from lzkernel.checkpoint import stored_config
    from lzkernel.config.loader import load_config

    try:
        if stored_config(ckpt) is None:
            raise ConfigError(f"checkpoint {ckpt} stores no config: it cannot be evaluated")
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    try:
        config = load_config(ckpt / "config.yaml", list(overrides), kernel.registry)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (the run's config needs the plugins it was trained with: "
                          f"{_missing_plugins(kernel, ckpt)}see `lzkernel plugins`)", exc.problems) from None
    try:  # a secret the run did not write: only a problem where the evaluation uses it (an env's key)
        check_unredacted(config.to_dict(), f"checkpoint {ckpt}'s config")
    except ConfigError as exc:
        log.warning("%s", exc)
    return config


@dataclass
class LoadedPolicy:
    """A policy restored from a checkpoint, with what was built around it."""

    checkpoint: Path
    run_dir: Path | None
    config: Any  # the checkpoint's resolved config (plus overrides)
    run: Any  # the RunContext that built env spec and policy (no run started)
    env_spec: Any
    policy: Any  # with the checkpoint's weights loaded
    trainer_state: Any  # state["trainer"] of the checkpoint
    meta: dict[str, Any]  # the checkpoint's meta (train_iter, env_steps, ...)


def load_policy(kernel: Any, target: str, *, checkpoint: str = "last", overrides: Sequence[str] = ()) -> LoadedPolicy:
    """Build the env spec and the policy of the checkpoint ``target``/``checkpoint`` (see
    :func:`find_checkpoint`) from its stored config plus ``overrides``, and load its weights.
    Every failure is a :class:`ConfigError` naming the checkpoint."""
    from lzkernel.checkpoint import load

    ckpt, run_dir = find_checkpoint(target, checkpoint)
    config = checkpoint_config(kernel, ckpt, overrides)

    from lzkernel.run import RunContext  # numpy only; torch below
    from lzkernel.seeding import seed_globals

    import torch

    run = RunContext(kernel, config, argv=[])
    run.device = "cpu" if config.run.device == "auto" else config.run.device
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    seed_globals(config.run.seed)
    try:
        state, _, meta = load(ckpt)
        trainer_state = state["trainer"]
        policy_state = trainer_state["policy"]
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    except (KeyError, TypeError):
        raise ConfigError(f"checkpoint {ckpt} holds no policy state (state['trainer']['policy']): "
                          "it was not written by a loop trainer") from None

    env_spec = run.build("env")
    policy = run.build("policy", env_spec=env_spec)
    policy.load_state_dict(policy_state)
    return LoadedPolicy(ckpt, run_dir, config, run, env_spec, policy, trainer_state, meta)


def evaluate(kernel: Any, target: str, *, checkpoint: str = "last", overrides: Sequence[str] = (),
             episodes: int | None = None, seed: int | None = None, video: str | None = None,
             video_episodes: int = 1) -> dict[str, Any]:
    """Play one evaluation of the policy in a checkpoint; the report (see the module docstring)."""
    extra = [*overrides, *([f"run.seed={seed}"] if seed is not None else [])]
    if episodes is not None:
        ckpt, _ = find_checkpoint(target, checkpoint)
        extra = [*extra, _episode_override(checkpoint_config(kernel, ckpt, extra).section("evaluator"), episodes)]
    loaded = load_policy(kernel, target, checkpoint=checkpoint, overrides=extra)
    ckpt, run_dir, config, run = loaded.checkpoint, loaded.run_dir, loaded.config, loaded.run
    env_spec, policy, trainer_state, meta = loaded.env_spec, loaded.policy, loaded.trainer_state, loaded.meta
    if config.name("evaluator") is None:
        raise ConfigError(f"{ckpt}/config.yaml has no evaluator section; add one with +evaluator.name=episodes")

    recorder = None
    eval_spec = env_spec
    if video is not None:
        from lzkernel.video import VideoRecorder

        if not isinstance(env_spec, RenderableEnvSpec):
            raise ConfigError(f"--video: env '{config.name('env')}' cannot render (its env spec does not provide "
                              "RenderableEnvSpec); drop --video")
        recorder = VideoRecorder(video, video_episodes, env_spec.render_fps)
        base = env_spec.eval_variant() if isinstance(env_spec, EvalVariantEnvSpec) else env_spec
        eval_spec = _RenderingSpec(base, recorder)
    evaluator = run.build("evaluator", env_spec=eval_spec, frame_stack=int(policy.target_spec.frame_stack))
    try:
        if isinstance(trainer_state, dict) and "evaluator" in trainer_state:
            evaluator.load_state_dict(trainer_state["evaluator"])
        index = None
        if isinstance(evaluator, ReplayableEvaluator):
            index = max(int(evaluator.evaluations) - 1, 0)
            evaluator.evaluations = index
        metrics = evaluator.evaluate(policy)
    finally:
        evaluator.close()
    # Another seed or batch of episodes plays other episodes: nothing to compare with.
    replay = index is not None and seed is None and episodes is None
    recorded = recorded_evaluation(run_dir, index) if replay else None
    report: dict[str, Any] = {
        "checkpoint": str(ckpt), "train_iter": meta.get("train_iter"), "env_steps": meta.get("env_steps"),
        "evaluation_index": index, "seed": config.run.seed, "metrics": metrics,
        "recorded": None if recorded is None else {
            "train_iter": recorded["train_iter"], "return_mean": recorded.get("eval/return_mean"),
            "same_weights": recorded["train_iter"] == meta.get("train_iter")},
    }
    if recorder is not None:
        report["video"] = {"path": str(recorder.path), "frames": recorder.write(),
                           "episode_lengths": recorder.episode_lengths, "fps": recorder.fps}
    return report


def summary(report: dict[str, Any]) -> list[str]:
    """The lines ``lzkernel eval`` prints."""
    m = report["metrics"]
    played = [f"{int(m['eval/episodes'])} episodes"] if "eval/episodes" in m else []
    if "eval/episode_length_mean" in m:
        played.append(f"mean length {m['eval/episode_length_mean']:.1f}")
    returns = [f"{k} {m[f'eval/return_{k}']:.3f}" for k in RETURN_STATS if f"eval/return_{k}" in m]
    lines = [f"checkpoint {report['checkpoint']} (train_iter {report['train_iter']}, env_steps {report['env_steps']})",
             f"evaluation {report['evaluation_index']} (run seed {report['seed']})" + (": " if played else "")
             + ", ".join(played)] + (["return " + "  ".join(returns)] if returns else [])
    # A third-party evaluator's own scalars (eval/success_rate, ...), after the common ones.
    common = {"eval/episodes", "eval/episode_length_mean", "eval/index", "eval/seconds", "eval/env_failures",
              *(f"eval/return_{k}" for k in RETURN_STATS)}
    own = sorted(k for k in m if k.startswith("eval/") and k not in common and not k.startswith("eval/vs_")
                 and isinstance(m[k], (int, float)))
    if own:
        lines.append("  ".join(f"{k[len('eval/'):]} {m[k]:.4g}" for k in own))
    rates = sorted(k for k in m if k.startswith("eval/vs_") and k.count("/") == 2 and k.endswith("win_rate"))
    for key in rates:
        who = key[len("eval/vs_"):-len("/win_rate")]
        lines.append(f"vs {who}: win {m[key]:.3f}  draw {m[f'eval/vs_{who}/draw_rate']:.3f}  "
                     f"loss {m[f'eval/vs_{who}/loss_rate']:.3f}")
    rec = report.get("recorded")
    if rec is not None:
        same = "identical" if rec["return_mean"] == m.get("eval/return_mean") else "DIFFERENT"
        note = "" if rec["same_weights"] else " (the checkpoint's weights are newer than that evaluation's)"
        lines.append(f"recorded at train_iter {rec['train_iter']}: return mean {rec['return_mean']:.3f} ({same}){note}")
    if "video" in report:
        v = report["video"]
        lines.append(f"video {v['path']}: {v['frames']} frames at {v['fps']:g} fps (episodes of {v['episode_lengths']} steps)")
    return lines


def over_seeds(targets: list[str], reports: list[dict[str, Any]]) -> list[str]:
    """The lines under a sweep's evaluations: for every group of seeds (the runs in one
    ``seed_<S>`` parent: a ``--seeds`` sweep, or one point of a ``--grid``), the mean, spread and
    range of their evaluations' mean returns; nothing for runs evaluated alone."""
    from lzkernel.sweep import seed_groups

    groups = {parent: [reports[i]["metrics"].get("eval/return_mean", math.nan) for i in ids]
              for parent, ids in seed_groups(targets).items() if Path(targets[ids[0]]).name.startswith("seed_")}
    lines = []
    for parent, means in groups.items():
        if len(means) > 1:
            head = f"{parent.name}: " if len(groups) > 1 else ""
            lines.append(f"{head}{len(means)} seeds: return mean over seeds {statistics.fmean(means):.3f}  "
                         f"std {statistics.pstdev(means):.3f}  min {min(means):.3f}  max {max(means):.3f}")
    return lines
