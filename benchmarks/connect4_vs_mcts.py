"""Connect four against OpenSpiel's MCTS bot: train ``connect4_alphazero.yaml`` and follow its
evaluations (100 greedy games as each player against MCTS with 1,000 random-rollout simulations
per move, the config's ``versus`` evaluator) until it wins at least 95% as first **and** as second
player, or the time cap.

Prints the curve of win rate against wall time per seed and writes JSON; the figure of the issue
is the median over seeds of the time to ≥ 95% both sides (goal: within 2 hours on the 2-core CPU).

    python benchmarks/connect4_vs_mcts.py --seeds 0 --cap 7200 --out benchmarks/results/connect4_vs_mcts.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _results import refuse_taken_keep_dirs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEY = "eval/vs_mcts1000/{side}/win_rate"


def _evals(metrics: Path) -> list[dict[str, Any]]:
    if not metrics.exists():
        return []
    out = []
    for line in metrics.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if rec.get("event") == "eval" and KEY.format(side="first") in rec:
            out.append(rec)
    return out


def run_seed(config: Path, seed: int, cap_s: float, target: float, overrides: list[str],
             keep: Path | None = None) -> dict[str, Any]:
    """Train ``config`` with ``seed`` until ``target`` as both players or ``cap_s`` seconds; the run
    directory is ``keep/seed<N>`` when ``keep`` is given (checkpoints for later scoring), else
    temporary."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep / f"seed{seed}" if keep is not None else Path(tmp) / "run"
        proc = subprocess.Popen([sys.executable, "-m", "lzkernel", "run", str(config), f"run.seed={seed}",
                                 f"run.out_dir={out}", "run.progress=false", *overrides],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        t0, seen, solved = time.perf_counter(), 0, None
        curve: list[dict[str, Any]] = []
        try:
            while proc.poll() is None and time.perf_counter() - t0 < cap_s:
                time.sleep(5)
                evals = _evals(out / "metrics.jsonl")
                for rec in evals[seen:]:
                    first, second = rec[KEY.format(side="first")], rec[KEY.format(side="second")]
                    point = {"wall_time": rec["wall_time"], "env_steps": rec["env_steps"],
                             "train_iter": rec["train_iter"], "first_win_rate": first, "second_win_rate": second}
                    curve.append(point)
                    print(f"  seed {seed}: {rec['wall_time']:8.1f} s {rec['env_steps']:8d} env steps  vs MCTS-1000: "
                          f"first {first:.2f}  second {second:.2f}", flush=True)
                    if solved is None and first >= target and second >= target:
                        solved = point
                seen = len(evals)
                if solved is not None:
                    break
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        return {"seed": seed, "solved": solved is not None, "at": solved, "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "connect4_alphazero.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cap", type=float, default=7200.0, help="seconds per seed at most")
    parser.add_argument("--target", type=float, default=0.95, help="win rate wanted as each player")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep each seed's run directory under KEEP/seed<N>")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args()
    refuse_taken_keep_dirs(args.keep, args.seeds)
    rows = [run_seed(args.config, s, args.cap, args.target, args.overrides, args.keep) for s in args.seeds]
    times = [r["at"]["wall_time"] if r["solved"] else float("inf") for r in rows]
    print(f"\nmedian time to >= {args.target:.0%} as both players: {statistics.median(times):.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"config": str(args.config), "cap_s": args.cap, "target": args.target,
                                        "overrides": args.overrides, "median_s": statistics.median(times),
                                        "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
