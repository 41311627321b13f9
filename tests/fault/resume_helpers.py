"""Helpers of the exact-resume tests: tiny real-trainer runs and a bit-for-bit comparison of
what two runs end with (checkpoint state, arrays, metrics).

A run "straight" goes to 2K train iterations; a "split" run goes to K, then ``--resume auto``
to 2K in a new process. Both end with a checkpoint at 2K; :func:`differences` lists every entry
of the two checkpoints and metric logs that is not bit-identical (wall-clock entries aside).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from fault_helpers import REPO, fault_env, lzk

#: Per config: the overrides that make it tiny (as tests/golden's runs). Eval every 10
#: iterations, a target update every 10, reanalysis once 100 transitions are stored.
_MUZERO_MODEL = ["policy.model.latent_dim=32", "policy.model.proj_hidden=64", "policy.model.proj_out=64",
                 "policy.model.pred_hidden=32", "policy.model.pred_out=64"]
_EPISODES = ["collector.envs=2", "collector.n_episode=2", "update_schedule.updates_per_collect=10",
             "policy.target_update_freq=10"]
TINY: dict[str, list[str]] = {
    "cartpole_rezero": [*_MUZERO_MODEL, *_EPISODES, "trainer.reanalyze_min_transitions=100"],
    "cartpole_muzero": [*_MUZERO_MODEL, *_EPISODES, "trainer.reanalyze_ratio=0.25"],
    "cartpole_efficientzero": ["policy.model.latent_dim=32", "policy.model.lstm_hidden=16",
                               "policy.model.proj_hidden=64", "policy.model.proj_out=64",
                               "policy.model.pred_hidden=32", "policy.model.pred_out=64", *_EPISODES],
    "cartpole_unizero": ["policy.model.embed_dim=16", "policy.eval_num_simulations=4",
                         "trainer.buffer_reanalyze_freq=1", "trainer.reanalyze_min_transitions=100",
                         "buffer.reanalyze_sequences=8", "update_schedule.ratio=0.05", "collector.envs=2",
                         "collector.num_segments=2", "collector.segment_length=20", "buffer.segment_length=20"],
    # the collector plays the random bot (its opponent is rebuilt from its seed at every collect)
    "tictactoe_alphazero_versus": ["policy.eval_num_simulations=6", "policy.model.channels=8", "collector.name=versus",
                                   "collector.envs=2", "collector.n_episode=2", "+collector.opponent={name: random}",
                                   "update_schedule.updates_per_collect=10"],
}
_RUN = ["run.threads=1", "run.progress=false", "run.log_every=5", "run.checkpoint_every=1000",
        "run.max_env_steps=100000", "policy.num_simulations=6", "policy.batch_size=32"]
COMMON = [*_RUN, "evaluator.envs=2", "evaluator.episodes=2", "evaluator.every_train_iters=10",
          "evaluator.stop_value=1e9"]
#: AlphaZero on tic-tac-toe against bots (TINY's last entry): its versus evaluator plays games,
#: not episodes.
_COMMON_OF = {"tictactoe_alphazero_versus": [*_RUN, "evaluator.envs=2", "evaluator.games=2",
                                             "evaluator.every_train_iters=10", "evaluator.opponents=[{name: random}]"]}
_CONFIG_OF = {"tictactoe_alphazero_versus": "tictactoe_alphazero"}

#: Metrics and state entries that measure time or memory, not the computation.
_VOLATILE_PREFIXES = ("time/", "sys/")
_VOLATILE_SUFFIXES = ("seconds", "_ms", "/ms", "steps_per_second", "_share")
_VOLATILE_STATE = ("timer",)


def run(stem: str, out_dir: Path, *extra: str, resume: bool = False, timeout: float = 300) -> Any:
    """``lzkernel run configs/<stem>.yaml`` with the tiny overrides (and ``--resume auto``); the
    finished process (its ``stderr`` says what the run did)."""
    args = ["run", REPO / "configs" / f"{_CONFIG_OF.get(stem, stem)}.yaml", f"run.out_dir={out_dir}",
            *_COMMON_OF.get(stem, COMMON), *TINY[stem], *extra]
    if resume:
        args += ["--resume", "auto"]
    proc = lzk(args, REPO, fault_env(), timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{stem} run into {out_dir} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def warm(stem: str, tmp: Path) -> None:
    """A few iterations of ``stem`` so that numba's cache holds its kernels before any compared
    run (a process that compiles a fast-math kernel rounds differently: lzk_common.numba_cache)."""
    run(stem, tmp / f"warm_{stem}", "run.max_train_iters=2", "evaluator.every_train_iters=1")


def metrics(out_dir: Path) -> list[dict[str, Any]]:
    """The run's metric records without wall-clock and memory entries (and without the record
    naming the checkpoint a resumed run wrote before its first: a straight run has none)."""
    out = []
    for line in (out_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == "resume":
            continue
        out.append({k: v for k, v in rec.items() if k != "wall_time" and not k.startswith(_VOLATILE_PREFIXES)
                    and not k.endswith(_VOLATILE_SUFFIXES)})
    return out


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            if str(k) in _VOLATILE_STATE:
                continue
            yield from _flatten(value[k], f"{prefix}{k}/")
    elif isinstance(value, (list, tuple)) and not all(isinstance(v, (int, float, str, bool)) for v in value):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}{i}/")
    else:
        yield prefix.rstrip("/"), value


def _plain(value: Any) -> Any:
    """Tensors and arrays as (dtype, shape, bytes): equality is bit-identity (NaN included)."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().contiguous()
        return ("tensor", str(t.dtype), tuple(t.shape), t.view(-1).view(torch.uint8).numpy().tobytes())
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    return value


def _logical_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's arrays with each buffer's pooled frames resolved (``frame_pool[frame_ids]``
    at the frames a segment uses): where in the pool a frame sits depends on the pool's history,
    not on what is stored."""
    out = dict(arrays)
    for key in [k for k in arrays if k.endswith("frame_ids")]:
        base = key[: -len("frame_ids")]
        ids, pool = arrays[key], arrays[base + "frame_pool"]
        n_data = arrays[base + "n_data"]
        stack = ids.shape[1] - (arrays[base + "actions"].shape[1])
        used = np.arange(ids.shape[1])[None, :] < (stack + n_data)[:, None]
        frames = np.where(used.reshape(*used.shape, *([1] * (pool.ndim - 1))), pool[ids], 0)
        out[base + "frame_ids"] = frames
        del out[base + "frame_pool"]
    return out


def checkpoint(path: Path) -> dict[str, Any]:
    """Every entry of checkpoint ``path`` (state and arrays), flattened, as comparable values."""
    from lzkernel.checkpoint import load

    state, arrays, _ = load(path)
    flat = {f"state/{k}": _plain(v) for k, v in _flatten(state)}
    flat.update({f"arrays/{k}": _plain(v) for k, v in _logical_arrays(dict(arrays)).items()})
    return flat


def differences(a: Path, b: Path, step: int, resumed_at: int | None = None) -> list[str]:
    """What differs between runs ``a`` and ``b``: checkpoint ``step`` entry by entry, then the
    metric records (empty when bit-identical). ``resumed_at``: ``b`` holds only what followed
    ``a``'s periodic checkpoint at that iteration (:func:`straight_and_resumed`), so ``a``'s
    earlier records are left out (those up to the train record that preceded the save)."""
    name = f"ckpt/step_{step:012d}"
    ca, cb = checkpoint(a / name), checkpoint(b / name)
    diffs = [f"{k}: only in {'a' if k in ca else 'b'}" for k in sorted(set(ca) ^ set(cb))]
    diffs += [f"{k} differs" for k in sorted(set(ca) & set(cb)) if ca[k] != cb[k]]
    ma, mb = metrics(a), metrics(b)
    if resumed_at is not None:
        ma = [r for r in ma if r["train_iter"] > resumed_at
              or (r["train_iter"] == resumed_at and r["event"] != "train")]
    if len(ma) != len(mb):
        diffs.append(f"metrics: {len(ma)} records against {len(mb)}")
    for i, (ra, rb) in enumerate(zip(ma, mb)):
        if ra != rb:
            keys = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
            diffs.append(f"metrics record {i} ({ra.get('event')} at train_iter {ra.get('train_iter')}): {keys}")
            break
    return diffs


def straight_and_split(stem: str, tmp: Path, k: int, *extra: str) -> tuple[Path, Path]:
    """Run ``stem`` 2K iterations straight and K + resume + K; the two run directories."""
    straight, split = tmp / "straight", tmp / "split"
    run(stem, straight, f"run.max_train_iters={2 * k}", *extra)
    run(stem, split, f"run.max_train_iters={k}", *extra)
    run(stem, split, f"run.max_train_iters={2 * k}", *extra, resume=True)
    return straight, split


def straight_and_resumed(stem: str, tmp: Path, k: int, *extra: str) -> tuple[Path, Path]:
    """Run ``stem`` 2K iterations straight with a checkpoint every K, then resume its periodic
    checkpoint at K into another directory for K more (the resume after a crash; one process
    fewer than :func:`straight_and_split`); the two run directories."""
    straight, resumed = tmp / "straight", tmp / "resumed"
    run(stem, straight, f"run.max_train_iters={2 * k}", f"run.checkpoint_every={k}", *extra)
    run(stem, resumed, f"run.max_train_iters={2 * k}", f"run.checkpoint_every={k}", *extra, "--resume",
        str(straight / f"ckpt/step_{k:012d}"))
    return straight, resumed
