"""Median env steps to solve, estimated from every recorded run of a side, with unsolved runs as
right-censored observations (Kaplan–Meier).

    python benchmarks/env_steps_pooled.py muzero --ours benchmarks/results/time_to_solve_cartpole_muzero_epyc_20261204.json ...

Why pool: env steps to solve vary 10× from run to run (CartPole MuZero: 450 to 6,000+), so the
median of five seeds moves by thousands from one sitting to the next. Unlike wall time, env
steps do not depend on the machine: a run on a slower machine only stops earlier (its time
limit is reached at fewer env steps). LightZero 0.2.0 does not seed its CartPole resets, so its
runs of one seed differ (they share only the network's initial weights), and every race recorded under ``benchmarks/results/`` (all
machines, all sittings, same success test) is a sample of one distribution. A run that did not
solve within its limit says only "more than the env steps it reached": the Kaplan–Meier estimate
uses exactly that, where counting it as "never" (:func:`time_to_solve.censored_median`) biases
the median up, and dropping it biases it down.

Our runs are deterministic per seed on a given machine and code, so our side is the runs given
with ``--ours`` (one machine, one code version, distinct seeds). Both medians get a bootstrap
interval (runs resampled with replacement). The estimate assumes independent censoring: a run's
limit is set by the machine's speed and the sitting, not by how that run was going.

``--measure updates`` estimates the median number of learner updates to solve instead (the
iteration of the solving evaluation; an unsolved run is censored at its last evaluation). Env
steps to solve = updates to solve × env steps collected per update, so the two medians together
say whether a gap in env steps comes from learning per update or from how many env steps each
collect brings in (both sides collect a fixed number of episodes per 100 updates, so longer
collect episodes mean more env steps per update).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from _results import RESULTS, write_results
from _rival import EVAL_EVERY as LIGHTZERO_EVAL_EVERY


#: (env steps or updates: at the solving evaluation, or where the run stopped unsolved; solved).
Run = tuple[float, bool]

#: What a median can be taken of: env steps or learner updates (train iterations) to solve.
MEASURES = ("env_steps", "updates")



def km_curve(runs: Sequence[Run]) -> list[tuple[float, float, int, int]]:
    """The Kaplan–Meier survival curve S(t) = P(not solved by t): one row (t, S(t), at risk, solved
    at t) per distinct time at which some run solved. At equal times solves count before stops
    (a run stopped at t was still at risk at t)."""
    at_risk, s, rows = len(runs), 1.0, []
    times = sorted({t for t, _ in runs})
    for t in times:
        solved = sum(1 for u, ok in runs if u == t and ok)
        stopped = sum(1 for u, ok in runs if u == t and not ok)
        if solved:
            s *= 1.0 - solved / at_risk
            rows.append((t, s, at_risk, solved))
        at_risk -= solved + stopped
    return rows


def km_median(runs: Sequence[Run]) -> float | None:
    """The smallest t with S(t) ≤ 0.5, or None when fewer than half are estimated solved by the
    longest run (the median then lies beyond every recorded run). Without censoring this is the
    sample median for odd counts and the lower middle value for even ones (where
    :func:`time_to_solve.censored_median` averages the two)."""
    for t, s, _, _ in km_curve(runs):
        if s <= 0.5 + 1e-12:
            return t
    return None


def bootstrap_interval(runs: Sequence[Run], reps: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float | None, float | None]:
    """Percentile interval of :func:`km_median` over ``reps`` resamples of the runs (with
    replacement); a resample whose median lies beyond its runs counts as +∞ (bound None)."""
    rng = np.random.default_rng(seed)
    n = len(runs)
    meds = []
    for _ in range(reps):
        m = km_median([runs[i] for i in rng.integers(0, n, n)])
        meds.append(float("inf") if m is None else m)
    lo, hi = np.quantile(np.array(meds), [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return (None if np.isinf(lo) else float(lo)), (None if np.isinf(hi) else float(hi))


def eval_interval(results: Sequence[dict[str, Any]]) -> int | None:
    """The evaluation interval (train iterations) of one batch of per-seed results, from its solved
    runs: train_iters_to_solve / (evals − 1), evaluations being at 0, I, 2I, …; None when no run
    solved after iteration 0 or the solved runs disagree."""
    found = {r["train_iters_to_solve"] / (r["evals"] - 1) for r in results
             if r.get("solved") and r.get("evals", 0) > 1 and r.get("train_iters_to_solve")}
    if len(found) != 1:
        return None
    (every,) = found
    return int(every) if every == int(every) else None


def _run_of(r: dict[str, Any], measure: str = "env_steps", every: int | None = None) -> tuple[float | None, bool]:
    """One per-seed result of :mod:`time_to_solve` as (env steps or updates, solved). For an
    unsolved run: how far it got, None when that was not recorded (env steps: results written
    before ``last_env_steps`` existed; updates: no ``last_train_iter`` and no evaluation interval
    ``every`` to count its evaluations with)."""
    if measure == "updates":
        if r["solved"]:
            return float(r["train_iters_to_solve"]), True
        last = r.get("last_train_iter")
        if last is None and every is not None and r.get("evals"):
            last = (r["evals"] - 1) * every
        return (None if last is None else float(last)), False
    if r["solved"]:
        return float(r["env_steps_to_solve"]), True
    last = r.get("last_env_steps")
    return (None if last is None else float(last)), False


def _same_test(d: dict[str, Any], threshold: float, episodes: int) -> bool:
    """Whether a result file used this success test (a file that does not say is taken to)."""
    return float(d.get("threshold", threshold)) == threshold and int(d.get("eval_episodes", episodes)) == episodes


def lightzero_runs(paths: Iterable[Path], algo: str, threshold: float = 195.0, episodes: int = 10,
                   measure: str = "env_steps") -> list[dict]:
    """LightZero's runs of ``algo`` recorded in ``paths`` (race or ``--only-lightzero`` JSONs of
    :mod:`time_to_solve`) under the same success test, each once (a file copied under another
    name adds nothing): dicts with file, seed, ``measure`` (env_steps or updates), solved."""
    seen, out = set(), []
    for path in sorted(paths):
        d = json.loads(Path(path).read_text())
        lz = d.get("lightzero") if isinstance(d, dict) else None
        if not isinstance(lz, dict) or lz.get("algo") != algo or not _same_test(d, threshold, episodes):
            continue
        every = eval_interval(lz["results"]) or LIGHTZERO_EVAL_EVERY.get(algo)
        for r in lz["results"]:
            value, solved = _run_of(r, measure, every)
            if value is None:  # leaving such a run of LightZero's out can only lower its median (against us)
                continue
            # A run is identified by what it recorded (the same run in two files counts once).
            key = (r["seed"], _run_of(r)[0], solved, r.get("process_seconds"))
            if key not in seen:
                seen.add(key)
                out.append({"file": Path(path).name, "seed": r["seed"], measure: value, "solved": solved})
    return out


def our_runs(paths: Iterable[Path], threshold: float = 195.0, episodes: int = 10,
             measure: str = "env_steps") -> list[dict]:
    """Our runs in ``paths`` (:mod:`time_to_solve` JSONs, which must use this success test); a seed
    given twice is an error (our runs repeat exactly on one machine, so it would count one draw
    twice)."""
    out: list[dict] = []
    seeds: set[int] = set()
    for path in paths:
        d = json.loads(Path(path).read_text())
        if not _same_test(d, threshold, episodes):
            raise SystemExit(f"{path}: success test {d.get('threshold')}/{d.get('eval_episodes')} episodes, "
                             f"expected {threshold}/{episodes}")
        every = eval_interval(d["results"])
        for r in d["results"]:
            if r["seed"] in seeds:
                raise SystemExit(f"{path}: seed {r['seed']} is already in an earlier --ours file")
            seeds.add(r["seed"])
            # An unsolved run of ours that did not record how far it got (None) counts as slower
            # than every run (against us; see side_summary).
            value, solved = _run_of(r, measure, every)
            out.append({"file": Path(path).name, "seed": r["seed"], measure: value, "solved": solved})
    return out


def side_summary(runs: list[dict], reps: int, measure: str = "env_steps") -> dict[str, Any]:
    """A side's runs (``measure`` None: unsolved, how far unknown) → counts, Kaplan–Meier median,
    its bootstrap interval and the longest recorded run."""
    pairs = [(float("inf") if r[measure] is None else r[measure], r["solved"]) for r in runs]
    lo, hi = bootstrap_interval(pairs, reps)
    return {"runs": len(pairs), "solved": sum(ok for _, ok in pairs), f"km_median_{measure}": km_median(pairs),
            f"longest_run_{measure}": max((t for t, _ in pairs if t != float("inf")), default=0.0),
            "bootstrap_95": [lo, hi], "records": runs}


def compare_medians(ours: dict[str, Any], theirs: dict[str, Any], measure: str = "env_steps") -> bool | None:
    """Whether our median is at most LightZero's, from two :func:`side_summary` results. A median
    beyond a side's runs is only known to exceed its longest run, so the answer is None where
    that leaves the order open."""
    median, longest = f"km_median_{measure}", f"longest_run_{measure}"
    a, b = ours[median], theirs[median]
    if a is not None and b is not None:
        return a <= b
    if a is None and b is None:
        return None
    if b is None:  # theirs > their longest run
        return True if a <= theirs[longest] else None
    # Ours lies beyond our longest finite run (runs censored at +inf do not raise that bound).
    return False if b <= ours[longest] else None


def _fmt(x: float | None, longest: float) -> str:
    """A median or bound for the table: a median beyond the runs prints as "> longest run"."""
    return f"{x:,.0f}" if x is not None else f"> {longest:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algo", help="LightZero's algorithm as recorded in the race JSONs (muzero, rezero, ...)")
    parser.add_argument("--ours", nargs="+", type=Path, required=True, help="our time_to_solve JSONs (distinct seeds)")
    parser.add_argument("--lightzero", nargs="*", type=Path, default=None,
                        help="JSONs holding LightZero's runs (default: every benchmarks/results/*.json)")
    parser.add_argument("--measure", choices=MEASURES, default="env_steps",
                        help="the median of env steps (default) or of learner updates to solve")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    measure = args.measure

    lz = lightzero_runs(args.lightzero if args.lightzero is not None else RESULTS.glob("*.json"), args.algo,
                        measure=measure)
    if not lz:
        raise SystemExit(f"no LightZero runs of {args.algo!r} found")
    sides = {"lightzero": side_summary(lz, args.bootstrap, measure),
             "ours": side_summary(our_runs(args.ours, measure=measure), args.bootstrap, measure)}
    label = measure.replace("_", " ")
    print(f"{'side':>9} {'runs':>5} {'solved':>6} {'KM median ' + label:>20} {'bootstrap 95%':>22}")
    for name, s in sides.items():
        lo, hi = s["bootstrap_95"]
        longest = s[f"longest_run_{measure}"]
        print(f"{name:>9} {s['runs']:>5} {s['solved']:>6} {_fmt(s[f'km_median_{measure}'], longest):>20} "
              f"{_fmt(lo, longest) + ' .. ' + _fmt(hi, longest):>22}")
    verdict = compare_medians(sides["ours"], sides["lightzero"], measure)
    print({True: f"our median {label} <= LightZero's (estimates)", False: f"our median {label} > LightZero's (estimates)",
           None: "undetermined: a median lies beyond the runs recorded"}[verdict])
    summary = {"algo": args.algo, "measure": measure, "method": "Kaplan-Meier median, unsolved runs right-censored",
               "ours_le_lightzero": verdict, **sides}
    suffix = "" if measure == "env_steps" else f"_{measure}"
    write_results(summary, f"env_steps_pooled_{args.algo}{suffix}.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
