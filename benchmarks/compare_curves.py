"""LightZero's training curves beside ours, iteration by iteration (issue 12: why seeds stall).

LightZero writes its scalars to TensorBoard under ``<exp>/log/serial`` (``learner_iter/…``,
``collector_iter/…``, ``evaluator_iter/…``, each against the train iteration); lzkernel writes
them to ``<run>/metrics.jsonl`` (``train/…``, ``collect/…``, ``eval/…`` with ``train_iter``).
This tool reads both, pairs the quantities that mean the same thing (:data:`PAIRS`) and prints,
at every ``--every`` iterations, the value each side had logged last at or before that
iteration::

    python benchmarks/compare_curves.py --lightzero LZ_EXP_DIR --ours RUN_DIR [--every 100] [--json F]

``LZ_EXP_DIR`` is LightZero's experiment directory (or any directory above its ``log/serial``, e.g.
the per-seed folder the race leaves); ``RUN_DIR`` is an lzkernel run directory. Both sides log
window means (LightZero over its ``log_show_after_iter`` window, lzkernel over ``run.log_every``).
Where the definitions differ the pair's note says how (:data:`PAIRS`).
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
from pathlib import Path
from typing import Any, NamedTuple


class Pair(NamedTuple):
    label: str
    lightzero: str   # TensorBoard tag under log/serial
    ours: str        # metrics.jsonl key
    note: str = ""


#: Quantities both frameworks log, LightZero's tag against ours.
PAIRS: tuple[Pair, ...] = (
    Pair("env steps", "collector_iter/total_envstep_count", "env_steps"),
    Pair("eval return", "evaluator_iter/eval_episode_return_mean", "eval/return_mean"),
    Pair("collect return", "collector_iter/reward_mean", "collect/return_mean"),
    Pair("collect episode length", "collector_iter/avg_envstep_per_episode", "collect/episode_length_mean"),
    Pair("target value", "learner_iter/target_value_avg", "train/target_value_mean",
         "LightZero: over the K + 1 unrolled steps; ours: the root step"),
    Pair("predicted value", "learner_iter/predicted_values_avg", "train/value_mean"),
    Pair("policy entropy", "learner_iter/policy_entropy_avg", "train/policy_entropy"),
    Pair("target policy entropy", "learner_iter/target_policy_entropy_avg", "train/target_policy_entropy"),
    Pair("value loss", "learner_iter/value_loss_avg", "train/loss_value"),
    Pair("reward loss", "learner_iter/reward_loss_avg", "train/loss_reward"),
    Pair("policy loss", "learner_iter/policy_loss_avg", "train/loss_policy"),
    Pair("SSL loss", "learner_iter/consistency_loss_avg", "train/loss_ssl"),
    Pair("priority", "learner_iter/value_priority_avg", "train/priority_mean"),
    Pair("grad norm", "learner_iter/total_grad_norm_before_clip_avg", "train/grad_norm"),
)

Series = list[tuple[int, float]]  # (train iteration, value), iterations non-decreasing


def lightzero_series(exp_dir: Path) -> dict[str, Series]:
    """tag → series from the event files of the one ``log/serial`` under ``exp_dir``; a file cut
    mid-record (the run was killed) keeps its complete records."""
    from lzk_sinks.tensorboard import read_scalars

    serial = [exp_dir] if list(exp_dir.glob("events.out.tfevents.*")) else sorted(exp_dir.glob("**/log/serial"))
    if len(serial) != 1:
        raise SystemExit(f"{exp_dir}: expected one LightZero log/serial directory below it, found {len(serial)}")
    return {tag: sorted(points) for tag, points in read_scalars(serial[0], allow_partial=True).items()}


def ours_series(run_dir: Path) -> dict[str, Series]:
    """key → series from ``run_dir/metrics.jsonl`` (``env_steps`` too, as a series of its own)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{run_dir}: no metrics.jsonl (expected an lzkernel run directory)")
    from lzkernel.runinfo import read_history

    out: dict[str, Series] = {}
    for rec in read_history(run_dir).records:  # a resumed run's abandoned records and resume records left out
        it = int(rec["train_iter"])
        for key, value in rec.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("train_iter", "wall_time"):
                out.setdefault(key, []).append((it, float(value)))
    return out


def at(series: Series, iteration: int) -> float | None:
    """The last value logged at or before ``iteration`` (None before the first)."""
    i = bisect.bisect_right(series, (iteration, math.inf))
    return series[i - 1][1] if i else None


def compare(lz: dict[str, Series], ours: dict[str, Series], every: int) -> dict[str, Any]:
    """{"iterations": [...], "rows": [{label, note, lightzero: [...], ours: [...]}]} sampled every
    ``every`` iterations up to the longer run's last logged iteration."""
    def last_iter(side: dict[str, Series], keys: list[str]) -> int:
        # Over the paired series only: LightZero's ``*_step/`` tags count env steps, not iterations.
        return max([side[k][-1][0] for k in keys if side.get(k)] or [0])

    end_lz = last_iter(lz, [p.lightzero for p in PAIRS])
    end_ours = last_iter(ours, [p.ours for p in PAIRS])
    iterations = list(range(every, max(end_lz, end_ours) + 1, every))
    rows = []
    for pair in PAIRS:
        a, b = lz.get(pair.lightzero, []), ours.get(pair.ours, [])
        # Past a run's last logged iteration it has no value (it had stopped), not its last one.
        rows.append({"label": pair.label, "note": pair.note, "lightzero_tag": pair.lightzero, "ours_key": pair.ours,
                     "lightzero": [at(a, i) if i <= end_lz else None for i in iterations],
                     "ours": [at(b, i) if i <= end_ours else None for i in iterations]})
    return {"iterations": iterations, "rows": rows, "last_iteration": {"lightzero": end_lz, "ours": end_ours}}


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def print_table(result: dict[str, Any], columns: int) -> None:
    iterations = result["iterations"]
    pick = list(range(len(iterations)))
    if len(pick) > columns:  # evenly spaced, the last one included
        pick = sorted({round(j * (len(iterations) - 1) / (columns - 1)) for j in range(columns)})
    head = f"{'iteration':<24} {'':<9}" + "".join(f"{iterations[j]:>8}" for j in pick)
    print(head)
    for row in result["rows"]:
        for side, name in (("lightzero", "LightZero"), ("ours", "lzkernel")):
            label = row["label"] if side == "lightzero" else ""
            print(f"{label:<24} {name:<9}" + "".join(f"{_fmt(row[side][j]):>8}" for j in pick))
    for row in result["rows"]:
        if row["note"]:
            print(f"note: {row['label']}: {row['note']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lightzero", type=Path, required=True, help="LightZero's experiment directory")
    ap.add_argument("--ours", type=Path, required=True, help="an lzkernel run directory")
    ap.add_argument("--every", type=int, default=100, help="sample every N train iterations (default 100)")
    ap.add_argument("--columns", type=int, default=12, help="iterations printed (the JSON has all)")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison here")
    args = ap.parse_args(argv)
    if args.every < 1:
        raise SystemExit("--every: expected a positive number of iterations")
    result = compare(lightzero_series(args.lightzero), ours_series(args.ours), args.every)
    result.update(lightzero_dir=str(args.lightzero), ours_dir=str(args.ours), every=args.every)
    print_table(result, args.columns)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
