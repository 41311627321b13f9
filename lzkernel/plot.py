"""``lzkernel plot``: PNG figures of runs (a metric against env steps, train iterations and wall
time) and of the benchmarks' time-to-solve JSON.

Runs whose resolved configs are equal except for ``run.seed`` and ``run.out_dir`` are one group:
a single run is drawn as its line; a group of several seeds as the median line with a min–max
band, over the x range every run of the group covers (each run linearly interpolated onto a
common grid). matplotlib (an optional extra, ``pip install 'lzkernel[plot]'``) is imported only
when a figure is made, with the Agg backend: the kernel stays importable without it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lzkernel.errors import ConfigError
from lzkernel.runinfo import require_run_dir

INSTALL = "pip install 'lzkernel[plot]' (matplotlib)"
FIGSIZE = (16.0, 4.5)  # inches; at DPI this is the PNG's size in pixels
DPI = 100
#: x axes of a run figure: (metrics.jsonl field, axis label)
AXES = (("env_steps", "env steps"), ("train_iter", "train iterations"), ("wall_time", "wall time (s)"))
#: a single run's line shows its points as dots up to this many points (evaluations are sparse)
MARKERS_UP_TO = 60


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(f"lzkernel plot needs matplotlib: {INSTALL}") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


@dataclass
class Series:
    """One run's values of a metric: ``x[axis]`` [n] per x axis, ``y`` [n], in logged order."""

    run_dir: Path
    x: dict[str, np.ndarray]
    y: np.ndarray


def load_series(run_dir: Path, metric: str) -> Series:
    """The records of ``run_dir/metrics.jsonl`` that hold ``metric``, in logged order, without
    those a later resume from an earlier iteration superseded; ConfigError when none does."""
    from lzkernel.runinfo import read_history

    path = run_dir / "metrics.jsonl"
    history = read_history(run_dir, lambda rec: isinstance(rec.get(metric), (int, float)))
    rows, names = history.records, history.names
    if not rows:
        from lzkernel.config.schema import suggest

        near = sorted(n for n in names if n.split("/")[-1] in metric or metric.split("/")[-1] in n)[:5]
        guess = suggest(metric, names)  # a typo: train/loss_vale → train/loss_value
        raise ConfigError(f"--metric {metric}: {path} logs no such metric" + (guess or (
            f" (similar: {', '.join(near)})" if near else f" ({len(names)} metrics logged; --list names them)")))
    x = {key: np.array([float(r.get(key, np.nan)) for r in rows]) for key, _ in AXES}
    # A resumed clock goes on from its checkpoint's wall time, which precedes what the run logged
    # after that save (an evaluation): kept non-decreasing so that interpolation stays valid.
    x["wall_time"] = np.fmax.accumulate(x["wall_time"])
    return Series(run_dir, x, np.array([float(r[metric]) for r in rows]))


def _config_key(run_dir: Path) -> str:
    """What groups runs: the resolved config without ``run.seed`` and ``run.out_dir``."""
    from lzkernel.config.strict_yaml import parse

    path = run_dir / "config.yaml"
    tree = parse(path.read_text(encoding="utf-8")) if path.is_file() else {}
    run = dict(tree.get("run") or {})
    run.pop("seed", None)
    run.pop("out_dir", None)
    return json.dumps({**tree, "run": run}, sort_keys=True, default=str)


def group_runs(run_dirs: Sequence[Path]) -> list[list[Path]]:
    """Runs grouped by :func:`_config_key`, in the order their first run was given."""
    groups: dict[str, list[Path]] = {}
    for d in run_dirs:
        groups.setdefault(_config_key(d), []).append(d)
    return list(groups.values())


def band(series: Sequence[Series], axis: str, points: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid [P], median [P], min [P], max [P]) of several runs on the x range all of them cover."""
    lo = max(float(np.nanmin(s.x[axis])) for s in series)
    hi = min(float(np.nanmax(s.x[axis])) for s in series)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.stack([np.interp(grid, s.x[axis], s.y) for s in series])  # [R, P]
    return grid, np.median(ys, axis=0), ys.min(axis=0), ys.max(axis=0)


def _label(group: Sequence[Path]) -> str:
    name = group[0].name
    if len(group) == 1:
        return name
    parents = {d.parent for d in group}
    if len(parents) == 1 and all(d.name.startswith("seed_") for d in group):  # a sweep (lzkernel run --seeds)
        name = f"{group[0].parent.name}/seed_*"
    else:
        name += " …"
    return f"{name} ({len(group)} seeds: median, min–max)"


def plot_runs(run_dirs: Sequence[str | Path], metric: str | Sequence[str] = "eval/return_mean") -> Any:
    """A figure with each metric (one row per metric, in the order given) against env steps
    (left), train iterations (middle) and wall time (right): one line per group of runs (module
    docstring). Returns the matplotlib Figure."""
    metrics = [metric] if isinstance(metric, str) else list(metric)
    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        require_run_dir(d)
    rows = [[[load_series(d, m) for d in g] for g in group_runs(dirs)] for m in metrics]  # read all before drawing
    plt = _pyplot()
    fig, axes = plt.subplots(len(metrics), len(AXES), figsize=(FIGSIZE[0], FIGSIZE[1] * len(metrics)), dpi=DPI,
                             squeeze=False)
    for row, m, groups in zip(axes, metrics, rows):
        for ax, (axis, label) in zip(row, AXES):
            for group in groups:
                if len(group) == 1:
                    marker = "o" if len(group[0].y) <= MARKERS_UP_TO else None
                    ax.plot(group[0].x[axis], group[0].y, marker=marker, markersize=3,
                            label=_label([s.run_dir for s in group]))
                else:
                    grid, med, lo, hi = band(group, axis)
                    (line,) = ax.plot(grid, med, label=_label([s.run_dir for s in group]))
                    ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2)
            ax.set_xlabel(label)
            ax.set_ylabel(m)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    return fig


def metric_names(run_dirs: Sequence[str | Path]) -> dict[str, int]:
    """Every metric the runs logged (``lzkernel plot --list``), sorted, with how many of the runs
    logged it; needs no matplotlib."""
    from lzkernel.runinfo import read_history

    counts: dict[str, int] = {}
    for d in map(Path, run_dirs):
        if not (d / "metrics.jsonl").is_file():
            raise ConfigError(f"{d}: no such run directory (no metrics.jsonl)")
        kept = read_history(d, lambda rec: True).records  # not the names of a rewound, abandoned history
        for name in {k for rec in kept for k in rec if "/" in k}:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def plot_time_to_solve(paths: Sequence[str | Path]) -> Any:
    """A figure of benchmark time-to-solve results (``benchmarks/results/time_to_solve_*.json``):
    per config, each seed's env steps (left) and seconds (right) to solve, with the median, and
    LightZero's median and the goal where the file gives them."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE, dpi=DPI)
    names = []
    for row, p in enumerate(map(Path, paths)):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            results = data["results"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{p}: not a time-to-solve result of benchmarks/time_to_solve.py ({exc})") from None
        names.append(Path(str(data.get("config", p.stem))).stem)
        for ax, key in zip(axes, ("env_steps_to_solve", "seconds_to_solve")):
            vals = [(r.get(key), r.get("solved", True)) for r in results if r.get(key) is not None]
            ax.scatter([v for v, _ in vals], [row] * len(vals), c=["C0" if ok else "C3" for _, ok in vals], zorder=3)
            if vals:
                ax.plot([np.median([v for v, _ in vals])] * 2, [row - 0.3, row + 0.3], color="k")
        for key, style in (("lightzero_median_s", "--"), ("goal_s", ":")):
            if data.get(key) is not None:
                axes[1].plot([data[key]] * 2, [row - 0.4, row + 0.4], style, color="C2")
    for ax, label in zip(axes, ("env steps to solve", "seconds to solve (dashed: LightZero, dotted: goal)")):
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save(fig: Any, out: str | Path) -> Path:
    """Write ``fig`` as a PNG at :data:`DPI` and close it."""
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise ConfigError(f"-o {out}: the figure is written as PNG; name it *.png")
    if not out.parent.is_dir():
        raise ConfigError(f"-o {out}: directory {out.parent} does not exist")
    fig.savefig(out, dpi=DPI, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out
