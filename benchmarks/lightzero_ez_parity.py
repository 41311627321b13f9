"""Our EfficientZero search (value prefixes, LSTM resets, two players) against LightZero 0.2.0's
C++ tree ``ctree_efficientzero`` on identical inputs.

    python benchmarks/lightzero_ez_parity.py [--roots 256] [--actions 4] [--sims 50]
        [--horizons 1 2 3 5] [--discounts 1.0 0.997] [--players 2] [--lightzero-runs 2] [--random-ties]

No model has to match: both searches call the same deterministic fake network
(``_lightzero_ez_two_player.fake_step``: per root seed and action path, a value-prefix increment,
a value and policy logits; the prefix accumulates like an LSTM state that the search zeroes where
it resets). Ours runs ``lzk_efficientzero.inference.ValuePrefixSearchNetwork``'s step (depth
tracking, state reset, rewards from prefixes) over the fake network in ``lzk_mcts.search``;
LightZero's runs its own ``EfficientZeroMCTSCtree.search`` (``_lightzero_ez_two_player.py``, in
the rival kit's venv via ``../shared/rival/setup.sh``). Roots: random legal masks (at least two
legal actions), players to move 1 or 2 at random (``--players 1``: single-player control), no root
noise; ours deterministic ties (first action), LightZero's ``rand()`` forced to 0 by a preloaded
shim (the same rule) unless ``--random-ties``.

Where the two disagree, per-node float64 searches written from first principles say why
(:func:`node_search`): the same search with LightZero's min-max statistics rule or ours, so every
disagreement is attributed to one rule. Printed per (horizon, discount): on how many roots the
visit counts are equal (ours vs LightZero, ours vs the per-node search with our rule, LightZero vs
the per-node search with LightZero's rule), and the root values' relative differences. JSON to
``benchmarks/results/lightzero_ez_parity.json`` (or ``--json-out``).

What it shows (``results/lightzero_ez_parity*.json``): ours equals the per-node search with our
rule on every root, LightZero equals it with LightZero's rule on every root (one near-tie
excepted), so rewards, their signs, the prefix reset per depth, the parent-prefix subtraction and
the backup agree; the searches differ only by the min-max statistics. LightZero's
``ctree_efficientzero`` backup widens them with ``prefix − parent prefix`` (the reset ignored,
SPEC-atari C.5 [BUG?], already a documented deviation of ours) and, with two players, with the
node's **own-view** value ``+γ·v`` although its selection normalises ``r + γ·(−v)`` (the parent's
view), as its ``ctree_muzero`` and its Python ``ptree_ez`` update them. Ours uses the parent's
view everywhere (SPEC §2.3's two-player rule).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from _lightzero_ez_two_player import PathRegistry, fake_children, fake_step, root_logits
from _results import write_results
from _rival import default_rival_dir, run_lightzero_driver

TIE_EPS = 1e-6


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------

def make_roots(n: int, num_actions: int, players: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` roots: seeds of the fake network, its root logits, legal masks (≥ 2 legal actions),
    players to move (1/2 at random, or -1 with ``players`` = 1)."""
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**63, n, dtype=np.uint64)
    legal = rng.random((n, num_actions)) < 0.75
    for b in range(n):
        while legal[b].sum() < 2:
            legal[b, rng.integers(num_actions)] = True
    to_play = rng.integers(1, 3, n) if players == 2 else np.full(n, -1)
    logits = np.stack([root_logits(int(s), num_actions) for s in seeds])
    return {"seeds": seeds, "logits": logits, "legal": legal, "to_play": to_play.astype(np.int64)}


# ----------------------------------------------------------------------------------------------
# Ours: ValuePrefixSearchNetwork's step over the fake network, in lzk_mcts.search
# ----------------------------------------------------------------------------------------------

class _FakeOurNet:
    """The fake network behind our snapshot's ``recurrent_inference`` interface (latent = node id,
    LSTM state (h, c) [n, 1] = the running prefix); outputs are scalars, decoded as they are."""

    def __init__(self, seeds: np.ndarray, num_actions: int, reward_scale: float) -> None:
        self.seeds, self.A, self.scale = seeds, num_actions, reward_scale
        self.registry = PathRegistry(len(seeds))

    def recurrent_inference(self, latent, state, action):
        import torch

        ids = latent[:, 0].numpy().astype(np.int64).tolist()
        parent_state = state[0][:, 0].numpy()
        new_ids, prefixes, values, logits = fake_children(self.registry, self.seeds, ids, action.numpy().tolist(),
                                                          parent_state, self.A, self.scale)
        prefix = torch.from_numpy(np.asarray(prefixes, np.float32))
        state = prefix[:, None].clone()
        return (torch.tensor(new_ids, dtype=torch.float32)[:, None], (state, state.clone()), prefix,
                torch.from_numpy(np.asarray(values, np.float32)), torch.from_numpy(np.stack(logits)))


def our_search(roots: dict[str, np.ndarray], horizon: int, discount: float, sims: int, reward_scale: float
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """Our search of every root: (visit counts [B, A], root values [B], deepest node's depth)."""
    import torch

    import lzk_mcts
    from lzk_common.slots import TensorSlots
    from lzk_efficientzero.inference import ValuePrefixSearchNetwork
    from lzk_mcts.slots import ArraySlots

    B, A = roots["logits"].shape
    # The snapshot without a model: its step (_step: depths, resets, prefix rewards) over the fake.
    snap = object.__new__(ValuePrefixSearchNetwork)
    snap.net = _FakeOurNet(roots["seeds"], A, reward_scale)
    snap.device, snap.horizon, snap.compiled = torch.device("cpu"), int(horizon), None
    snap.latent_shape = (1,)
    snap.latents, snap.hidden, snap.cell = (TensorSlots((1,), "cpu") for _ in range(3))
    snap.prefix, snap.depth = ArraySlots((), np.float32), ArraySlots((), np.int64)
    snap.forward_seconds, snap.forward_calls = 0.0, 0
    snap._decode_pair = lambda pair: (pair[0].numpy(), pair[1].numpy())
    step = snap.begin(torch.arange(B, dtype=torch.float32)[:, None], sims)
    cfg = lzk_mcts.SearchConfig(num_simulations=sims, discount=discount)
    res = lzk_mcts.search(step, roots["logits"], roots["legal"], roots["to_play"], cfg, np.random.default_rng(0),
                          add_noise=False, deterministic=True)
    return res.visit_counts.astype(np.float64), res.root_value.astype(np.float64), int(res.stats["search/max_depth"])


# ----------------------------------------------------------------------------------------------
# Per-node float64 search, with LightZero's min-max rule or ours
# ----------------------------------------------------------------------------------------------

class _Node:
    __slots__ = ("prior", "visits", "value_sum", "prefix", "reset", "to_play", "reward", "raw_reward", "children")

    def __init__(self, prior: float) -> None:
        self.prior, self.visits, self.value_sum = prior, 0, 0.0
        self.prefix, self.reset, self.to_play = 0.0, True, -1
        self.reward = self.raw_reward = 0.0
        self.children: dict[int, _Node] = {}

    def value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    def expand(self, logits: np.ndarray, legal: list[int]) -> None:
        m = max(float(logits[a]) for a in legal)
        e = {a: math.exp(float(logits[a]) - m) for a in legal}
        total = sum(e.values())
        self.children = {a: _Node(e[a] / total) for a in legal}


def node_search(seed: int, logits: np.ndarray, legal: np.ndarray, to_play: int, horizon: int, discount: float,
                sims: int, reward_scale: float, minmax_rule: str, delta: float = 0.01, pb_c_base: float = 19652.0,
                pb_c_init: float = 1.25) -> tuple[list[int], float]:
    """One root, one node at a time: (visit counts [A], root value). Two-player zero-sum when
    ``to_play`` is 1/2: a node's value is from its player-to-move's view, an edge's reward
    (prefix difference, or the prefix below a reset) is the mover's, and the parent's Q of a
    child is r + γ·(−v_child). ``minmax_rule`` says what widens the min-max statistics at each
    node of a backed-up path:

    * ``"q"`` (ours, SPEC, LightZero's MuZero and ptree_ez): the node's Q from its parent's view,
      r + γ·σ·v with the reset-corrected r and σ = −1 for two players;
    * ``"lightzero_ez"`` (LightZero's ``ctree_efficientzero`` cbackpropagate): prefix − parent's
      prefix (not reset-corrected) + γ·v with the node's own-view v, for either mode;
    * ``"raw_reward"`` / ``"own_view"``: one of those two changes each (for attribution).
    """
    raw = minmax_rule in ("lightzero_ez", "raw_reward")
    own = minmax_rule in ("lightzero_ez", "own_view")
    if minmax_rule not in ("q", "lightzero_ez", "raw_reward", "own_view"):
        raise ValueError(f"unknown minmax_rule {minmax_rule!r}")
    A = len(logits)
    two = to_play != -1
    root = _Node(0.0)
    root.to_play = to_play
    root.expand(logits, [a for a in range(A) if legal[a]])
    root.visits = 1
    lo, hi = math.inf, -math.inf
    for _ in range(sims):
        node, path, actions, parent_q, is_root = root, [root], [], 0.0, True
        while node.children:
            total, count = 0.0, 0
            for c in node.children.values():
                if c.visits:
                    total += c.reward + discount * c.value()
                    count += 1
            mean_q = total / count if is_root and count else (parent_q + total) / (count + 1)
            parent_q, is_root = mean_q, False
            n = node.visits - 1
            factor = (math.log((n + pb_c_base + 1.0) / pb_c_base) + pb_c_init) * math.sqrt(n)
            scores = {}
            for a, c in node.children.items():
                if c.visits:
                    q = c.reward + discount * (-c.value() if two else c.value())
                else:
                    q = mean_q
                if hi - lo > 0:
                    q = (q - lo) / max(hi - lo, delta)
                scores[a] = factor / (1 + c.visits) * c.prior + min(max(q, 0.0), 1.0)
            best = max(scores.values())
            a = min(a for a, s in scores.items() if s >= best - TIE_EPS)
            parent, node = node, node.children[a]
            actions.append(a)
            path.append(node)
        # expand the leaf with the fake network (state: the parent's running prefix, 0 after a reset)
        state = 0.0 if parent.reset else parent.prefix
        prefix, value, child_logits = fake_step(seed, tuple(actions), state, A, reward_scale)
        node.prefix = float(prefix)
        node.reset = len(actions) % horizon == 0
        node.to_play = (3 - parent.to_play) if two else -1
        node.raw_reward = float(np.float32(prefix) - np.float32(parent.prefix))
        node.reward = float(prefix) if parent.reset else node.raw_reward
        node.expand(child_logits, list(range(A)))
        # back up from the leaf's player's view
        boot = float(value)
        leaf_player = node.to_play
        for i in range(len(path) - 1, -1, -1):
            nd = path[i]
            same = (not two) or nd.to_play == leaf_player
            nd.value_sum += boot if same else -boot
            nd.visits += 1
            stat = (nd.raw_reward if raw else nd.reward) + discount * (-nd.value() if two and not own else nd.value())
            lo, hi = min(lo, stat), max(hi, stat)
            boot = (-nd.reward if (two and same) else nd.reward) + discount * boot
    counts = [root.children[a].visits if a in root.children else 0 for a in range(A)]
    return counts, root.value()


def node_searches(roots: dict[str, np.ndarray], horizon: int, discount: float, sims: int, reward_scale: float,
                  minmax_rule: str) -> tuple[np.ndarray, np.ndarray]:
    visits, values = [], []
    for b in range(len(roots["seeds"])):
        c, v = node_search(int(roots["seeds"][b]), roots["logits"][b], roots["legal"][b], int(roots["to_play"][b]),
                           horizon, discount, sims, reward_scale, minmax_rule)
        visits.append(c)
        values.append(v)
    return np.asarray(visits, np.float64), np.asarray(values, np.float64)


# ----------------------------------------------------------------------------------------------

def agreement(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Visits equal on how many roots, the largest visit difference, root values' relative diffs."""
    same = np.all(a[0] == b[0], axis=1)
    rel = np.abs(a[1] - b[1]) / (1.0 + np.abs(b[1]))
    return {"visits_equal": int(same.sum()), "roots": int(len(same)),
            "max_visit_diff": float(np.abs(a[0] - b[0]).max()),
            "root_value_max_rel_diff": float(rel.max()), "root_value_median_rel_diff": float(np.median(rel)),
            "differing_roots": np.flatnonzero(~same)[:20].tolist()}


def main() -> int:
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roots", type=int, default=256)
    parser.add_argument("--actions", type=int, default=4)
    parser.add_argument("--sims", type=int, default=50)
    parser.add_argument("--horizons", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--discounts", type=float, nargs="+", default=[1.0, 0.997])
    parser.add_argument("--players", type=int, choices=(1, 2), default=2)
    parser.add_argument("--reward-scale", type=float, default=0.5, help="value-prefix increments in ±this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lightzero-runs", type=int, default=2)
    parser.add_argument("--random-ties", action="store_true",
                        help="LightZero breaks ties with its wall-clock-seeded rand() (no first-tie shim)")
    parser.add_argument("--no-lightzero", action="store_true", help="only ours against the per-node searches")
    parser.add_argument("--rival-dir", type=Path, default=None)
    parser.add_argument("--json-out")
    args = parser.parse_args()

    roots = make_roots(args.roots, args.actions, args.players, args.seed)
    configs = [(h, g, args.sims) for h in args.horizons for g in args.discounts]
    runs: list[dict[str, np.ndarray]] = []
    if not args.no_lightzero:
        if args.random_ties:
            os.environ["LZK_RANDOM_TIES"] = "1"
        rival = args.rival_dir or default_rival_dir()
        arrays = {**roots, "configs": np.asarray(configs, np.float64), "reward_scale": np.asarray(args.reward_scale)}
        runs = [run_lightzero_driver(rival, "_lightzero_ez_two_player.py", arrays) for _ in range(args.lightzero_runs)]
    result: dict[str, Any] = {
        "roots": args.roots, "actions": args.actions, "simulations": args.sims, "players": args.players,
        "reward_scale": args.reward_scale, "seed": args.seed,
        "lightzero_first_tie_shim": bool(runs[0]["first_tie_shim"]) if runs else None, "configs": []}
    print(f"{args.roots} roots, {args.actions} actions, {args.sims} simulations, "
          f"{'two players' if args.players == 2 else 'one player'}; LightZero ties: "
          f"{'rand()' if args.random_ties else 'first (shim)'}")
    for k, (h, g, s) in enumerate(configs):
        visits, values, depth = our_search(roots, h, g, s, args.reward_scale)
        ours = (visits, values)
        ref_q = node_searches(roots, h, g, s, args.reward_scale, "q")
        ref_lz = node_searches(roots, h, g, s, args.reward_scale, "lightzero_ez")
        partial = {rule: node_searches(roots, h, g, s, args.reward_scale, rule) for rule in ("raw_reward", "own_view")}
        entry: dict[str, Any] = {"lstm_horizon_len": h, "discount": g, "our_max_depth": depth,
                                 "ours_vs_node_search_q_rule": agreement(ours, ref_q),
                                 "node_search_rules_differ_on": int((~np.all(ref_q[0] == ref_lz[0], axis=1)).sum())}
        line = (f"H={h} γ={g} (depth ≤ {depth}): ours = per-node(our rule) on "
                f"{entry['ours_vs_node_search_q_rule']['visits_equal']}/{args.roots}; the two min-max rules' "
                f"visits differ on {entry['node_search_rules_differ_on']}")
        if runs:
            lz = [(r[f"visits_{k}"], r[f"values_{k}"]) for r in runs]
            entry["ours_vs_lightzero"] = agreement(ours, lz[0])
            entry["lightzero_vs_node_search_lightzero_rule"] = agreement(lz[0], ref_lz)
            entry["lightzero_vs_node_search_q_rule"] = agreement(lz[0], ref_q)
            entry["lightzero_vs_node_search_one_change"] = {
                rule: agreement(lz[0], ref)["visits_equal"] for rule, ref in partial.items()}
            entry["lightzero_reruns_vs_first"] = [agreement(x, lz[0])["visits_equal"] for x in lz[1:]]
            o = entry["ours_vs_lightzero"]
            line += (f"; ours = LightZero on {o['visits_equal']}/{args.roots} (max visit diff "
                     f"{o['max_visit_diff']:.0f}, root value rel. diff median {o['root_value_median_rel_diff']:.2g}"
                     f" max {o['root_value_max_rel_diff']:.2g}); LightZero = per-node(LightZero's rule) on "
                     f"{entry['lightzero_vs_node_search_lightzero_rule']['visits_equal']}, = per-node(our rule) on "
                     f"{entry['lightzero_vs_node_search_q_rule']['visits_equal']}, with one change only "
                     f"{entry['lightzero_vs_node_search_one_change']}; LightZero reruns equal: "
                     f"{entry['lightzero_reruns_vs_first']}")
        print(line)
        result["configs"].append(entry)
    write_results(result, "lightzero_ez_parity.json", args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
