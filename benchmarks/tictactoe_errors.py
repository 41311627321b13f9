"""Which tic-tac-toe positions a checkpoint gets wrong, by kind and by depth, at several search sizes.

For every one of the 4,520 reachable non-terminal positions the checkpoint's policy chooses its
eval-mode move (its own search, as ``tictactoe_solved.py`` scores it) with each ``--sims`` value of
``policy.eval_num_simulations``; a move is wrong when it is not minimax-optimal. Positions are
grouped by what perfect play makes of them, from the mover's side:

* ``win_in_one``: a move wins at once;
* ``win_later``: won, but only through a later threat (a fork, or a move that forces one);
* ``draw``: drawn (a wrong move loses);
* ``loss``: lost whatever is played (every move is optimal, so never wrong).

Printed per search size: wrong positions per kind (``wrong/total``) and per number of stones on
the board. A count that grows with the search size says the search is misled by the learned
model's deeper predictions rather than helped::

    python benchmarks/tictactoe_errors.py RUN_DIR --sims 25 50 100 [--checkpoint last] [--json F]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _board import greedy_moves  # noqa: E402

KINDS = ("win_in_one", "win_later", "draw", "loss")


def position_kind(solver: Any, state: Any) -> str:
    """One of :data:`KINDS` for the non-terminal ``state`` (from the player to move's side)."""
    me = state.current_player()
    for a in state.legal_actions():
        child = state.child(a)
        if child.is_terminal() and child.returns()[me] > 0:
            return "win_in_one"
    return {1: "win_later", 0: "draw", -1: "loss"}[solver.value(state)]


def classify(policy: Any, spec: Any) -> dict[str, Any]:
    """{"wrong": n, "by_kind": {kind: [wrong, total]}, "by_stones": {stones: wrong}} of the
    policy's greedy moves on every reachable non-terminal position."""
    from lzk_envs.tictactoe_solver import tictactoe_solver

    solver = tictactoe_solver()
    states = list(solver.positions())
    actions = greedy_moves(policy, spec, states)
    by_kind = {k: [0, 0] for k in KINDS}
    by_stones: collections.Counter[int] = collections.Counter()
    for a, s in zip(actions, states):
        kind = position_kind(solver, s)
        by_kind[kind][1] += 1
        if int(a) not in solver.optimal_actions(s):
            by_kind[kind][0] += 1
            by_stones[len(s.history())] += 1
    return {"wrong": sum(w for w, _ in by_kind.values()), "by_kind": by_kind,
            "by_stones": dict(sorted(by_stones.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="run directory or checkpoint path")
    parser.add_argument("--checkpoint", default="last", help="last, best or a step directory (default last)")
    parser.add_argument("--sims", type=int, nargs="+", default=[25, 100], help="eval_num_simulations to try")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()

    from lzkernel.evaluate import load_policy
    from lzkernel.pluginmanager import Kernel

    kernel = Kernel()  # plugins discovered once; each search size rebuilds the policy from the checkpoint
    rows = []
    for sims in args.sims:
        loaded = load_policy(kernel, args.run, checkpoint=args.checkpoint,
                             overrides=[f"policy.eval_num_simulations={sims}"])
        row = {"sims": sims, "train_iter": loaded.meta.get("train_iter"), **classify(loaded.policy, loaded.env_spec)}
        rows.append(row)
        kinds = "  ".join(f"{k} {w}/{t}" for k, (w, t) in row["by_kind"].items())
        stones = " ".join(f"{n}:{w}" for n, w in row["by_stones"].items())
        print(f"{sims:>4} simulations: {row['wrong']:>4} wrong  ({kinds})  by stones {stones}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"run": args.run, "checkpoint": args.checkpoint, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
