"""Time to perfect tic-tac-toe: train a config (``tictactoe_alphazero.yaml`` or
``tictactoe_muzero.yaml``) and, at every evaluation, score the policy against perfect play until
it is perfect:

* on every one of the 4,520 reachable non-terminal positions the greedy move (the policy's own
  search, as in eval mode) is minimax-optimal, and
* it loses none of 200 games against the perfect player (100 as each side).

Printed per seed: the wall time and env steps at which both held (the scoring's own time is
excluded), the last scores, and the curve; the JSON has every evaluation. The median over seeds
is the figure of the issue (goal: ≤ 5 minutes for AlphaZero, ≤ 10 for MuZero).

    python benchmarks/tictactoe_solved.py configs/tictactoe_alphazero.yaml --seeds 0 1 2 --cap 900
    python benchmarks/tictactoe_solved.py configs/tictactoe_muzero.yaml --seeds 0 1 2 --cap 600 --keep DIR \
        --out benchmarks/results/tictactoe_solved_muzero.json

``--keep DIR`` keeps each seed's run directory as ``DIR/seed<N>`` (its checkpoints can then be
scored at other search sizes with ``tictactoe_errors.py``); an existing one is refused (exit 2).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _board import games_against, optimal_move_rate  # noqa: E402
from _results import refuse_taken_keep_dirs  # noqa: E402


def run_seed(config: Path, seed: int, cap_s: float, every: int, overrides: list[str],
             keep: Path | None = None) -> dict[str, Any]:
    """Train ``config`` with ``seed`` until perfect or ``cap_s`` seconds of training; the run
    directory is ``keep/seed<N>`` when ``keep`` is given (its checkpoints can then be scored
    again, e.g. by ``tictactoe_errors.py``), else temporary."""
    from lzkernel.config.loader import load_config
    from lzkernel.pluginmanager import Kernel
    from lzkernel.run import RunContext

    kernel = Kernel()
    with tempfile.TemporaryDirectory() as tmp:
        out = keep / f"seed{seed}" if keep is not None else Path(tmp) / "run"
        cfg = load_config(config, [f"run.seed={seed}", f"run.out_dir={out}", "run.progress=false",
                                   f"evaluator.every_train_iters={every}", *overrides], kernel.registry)
        curve: list[dict[str, Any]] = []
        state = {"scoring_s": 0.0, "solved": None}
        with RunContext(kernel, cfg) as run:
            trainer = run.build("trainer")
            evaluator, spec = trainer.evaluator, trainer.env_spec
            evaluate, reached = evaluator.evaluate, evaluator.reached
            t_start = time.perf_counter()

            def scored(policy: Any) -> dict[str, float]:
                metrics = evaluate(policy)
                t0 = time.perf_counter()
                rate, wrong = optimal_move_rate(policy, spec)
                games = games_against(policy, spec, "perfect", 100, seed=seed * 1000 + len(curve))
                state["scoring_s"] += time.perf_counter() - t0
                losses = games["first_loss"] + games["second_loss"]
                train_s = time.perf_counter() - t_start - state["scoring_s"]
                point = {"train_s": round(train_s, 1), "env_steps": run.env_steps, "train_iter": run.train_iter,
                         "optimal_move_rate": rate, "wrong_positions": wrong, **games}
                curve.append(point)
                print(f"  seed {seed}: {train_s:6.1f} s {run.env_steps:7d} env steps  optimal {rate:.4f} "
                      f"({wrong} wrong)  vs perfect: lost {int(losses)}/200", flush=True)
                if wrong == 0 and losses == 0 and state["solved"] is None:
                    state["solved"] = point
                metrics["eval/optimal_move_rate"] = rate
                metrics["eval/vs_perfect/loss_rate"] = losses / 200
                return metrics

            def done(mean: float) -> bool:
                over = curve and curve[-1]["train_s"] >= cap_s
                return state["solved"] is not None or bool(over) or reached(mean)

            evaluator.evaluate, evaluator.reached = scored, done
            trainer.train()
        return {"seed": seed, "solved": state["solved"] is not None, "at": state["solved"], "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cap", type=float, default=900.0, help="seconds of training per seed at most")
    parser.add_argument("--every", type=int, default=200, help="train iterations between scorings")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default: print only)")
    parser.add_argument("--keep", type=Path, default=None, help="keep each seed's run directory under KEEP/seed<N>")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. policy.num_simulations=50")
    args = parser.parse_intermixed_args()
    refuse_taken_keep_dirs(args.keep, args.seeds)
    rows = []
    for seed in args.seeds:
        print(f"{args.config.name} seed {seed}", flush=True)
        rows.append(run_seed(args.config, seed, args.cap, args.every, args.overrides, args.keep))
    times = [r["at"]["train_s"] if r["solved"] else float("inf") for r in rows]
    median = statistics.median(times)
    print(f"\n{'seed':>4} {'solved':>7} {'seconds':>8} {'env steps':>10}")
    for r in rows:
        # unsolved: where it stood at its last scoring, marked ">" (not solved by then)
        at = r["at"] or (r["curve"][-1] if r["curve"] else {"train_s": float("nan"), "env_steps": 0})
        mark = "" if r["solved"] else ">"
        print(f"{r['seed']:>4} {str(r['solved']):>7} {mark + format(at['train_s'], '.1f'):>8} "
              f"{mark + str(at['env_steps']):>10}")
    print(f"median time to perfect play: {median:.1f} s")
    if args.out:
        args.out.write_text(json.dumps({"config": str(args.config), "cap_s": args.cap, "overrides": args.overrides,
                                        "machine": platform.processor() or platform.machine(),
                                        "median_s": median, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
