"""The AlphaZero policy against LightZero 0.2.0's AlphaZero (SPEC §5), item by item:

* the search: a per-node reference of LightZero's search (its ``ptree_az`` semantics, written here
  from SPEC §5.2: each simulation replays from the root, N = the parent's own visit count, Q = the
  raw mean from the mover's view, 0 for an unvisited child, a terminal leaf worth +1 to the player
  to move there if it won, −1 if it lost, 0 for a draw, the leaf value negated at every level)
  gives the same visit counts as the batched search of ``AlphaZeroPolicy``, on tic-tac-toe and
  connect-four positions searched in one batch, with a deterministic stand-in for the network.
  Two documented differences are built into the reference (docs/algorithms/alphazero.md): priors
  are renormalised over the legal moves, and scores within 1e-6 of the best tie (the first such
  action is taken; LightZero compares exactly);
* the learner: LightZero's loss (−Σ π·log p + w_v·(v − z)² − w_H·H(p), batch means), clipping of
  the global gradient norm over every parameter, Adam with L2 weight decay on every parameter;
* eval mode's simulations when ``eval_num_simulations`` is unset: min(800, 4·num_simulations).
"""
from __future__ import annotations

import copy
import hashlib
import math
from typing import Callable

import numpy as np
import pytest
import torch

from lzk_alphazero.config import AlphaZeroModelConfig, AlphaZeroPolicyConfig
from lzk_alphazero.learner import AlphaZeroLearner
from lzk_alphazero.model import AlphaZeroNet
from lzk_alphazero.policy import AlphaZeroPolicy
from lzk_envs.openspiel import OpenSpielEnvSpec
from lzkernel import Batch

C1, C2 = 1.25, 19652.0  # pb_c_init, pb_c_base (LightZero's and ours)


def _network(num_actions: int) -> Callable:
    """A deterministic stand-in for the network: logits and a value in (−1, 1) drawn from a hash
    of each observation (the observation says who moves, so the value is the mover's)."""
    def evaluate(obs: np.ndarray, legal: object = None, to_play: object = None) -> tuple[np.ndarray, np.ndarray]:
        logits, values = [], []
        for x in np.asarray(obs, np.float32):
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(x.tobytes()).digest()[:8], "little"))
            logits.append(1.5 * rng.normal(size=num_actions))
            values.append(math.tanh(rng.normal()))
        return np.asarray(logits, np.float32), np.asarray(values, np.float32)
    return evaluate


class _Node:
    """A node of the reference tree: its prior, visits and the sum of the values backed up into
    it, each from the view of the player who moved into it."""

    def __init__(self, prior: float) -> None:
        self.prior, self.visits, self.value_sum = prior, 0, 0.0
        self.children: dict[int, _Node] = {}  # in ascending action order

    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0


def _expand(node: _Node, state: object, sim: object, evaluate: Callable) -> float:
    """Children for the legal moves with priors softmax(logits) over them; the network's value."""
    view = sim.observe([state])
    logits, value = evaluate(view.obs)
    legal = np.flatnonzero(view.legal[0])
    p = np.exp(logits[0, legal].astype(np.float64) - logits[0, legal].max())
    for a, prior in zip(legal.tolist(), (p / p.sum()).tolist()):
        node.children[a] = _Node(prior)
    return float(value[0])


def lightzero_search(sim: object, root_state: object, evaluate: Callable, simulations: int,
                     num_actions: int) -> list[int]:
    """Root visit counts of LightZero's AlphaZero search (SPEC §5.2, one node at a time)."""
    root, _ = reference_tree(sim, root_state, evaluate, simulations)
    return [root.children[a].visits if a in root.children else 0 for a in range(num_actions)]


def reference_tree(sim: object, root_state: object, evaluate: Callable, simulations: int) -> tuple[_Node, float]:
    """The root of that search after ``simulations`` and the network's value at the root."""
    root = _Node(1.0)
    root_value = _expand(root, root_state, sim, evaluate)
    for _ in range(simulations):
        node, state, path = root, sim.clone(root_state), [root]
        mover = -1
        while node.children:
            n = node.visits  # the node's own visits (the root's: the simulations so far)
            pb_c = (math.log((n + C2 + 1) / C2) + C1) * math.sqrt(n)
            scores = {a: pb_c / (c.visits + 1) * c.prior + c.q() for a, c in node.children.items()}
            best = max(scores.values())
            action = min(a for a, s in scores.items() if s >= best - 1e-6)
            mover = state.current_player()
            sim.step([state], np.array([action]))
            node = node.children[action]
            path.append(node)
        if state.is_terminal():  # the player to move there is the last mover's opponent
            leaf_value = float(state.returns()[1 - mover])
        else:
            leaf_value = _expand(node, state, sim, evaluate)
        value = -leaf_value  # into the leaf: the view of the player who moved into it
        for visited in reversed(path):
            visited.visits += 1
            visited.value_sum += value
            value = -value
    return root, root_value


def _eval_act_on_tictactoe(simulations: int, positions: int, max_moves: int, seed: int) -> tuple:
    """An eval-mode act of the policy, with the stand-in network, on random tic-tac-toe positions:
    (simulator, network, positions, ActResult)."""
    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    policy = AlphaZeroPolicy(AlphaZeroPolicyConfig(num_simulations=8, eval_num_simulations=simulations), spec, seed=0)
    evaluate = _network(spec.num_actions)
    policy.evaluate = evaluate  # type: ignore[method-assign]
    states = _positions(spec, positions, max_moves, seed=seed)
    sim = spec.make_simulator()
    view = sim.observe(states)
    res = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.arange(positions), states=states)
    return sim, evaluate, states, res


def test_the_root_value_averages_every_evaluation_of_the_search() -> None:
    """The root value an act reports (a value target with ``buffer.root_value_weight``) is the mean,
    from the mover's view, of the network's value at the root and the S values backed up through
    it: (v0 + Σ_children value_sum) / (S + 1). (The shared search's Σ / (S + 1) alone, the old
    value, left v0 out.)"""
    sim, evaluate, states, res = _eval_act_on_tictactoe(simulations=30, positions=8, max_moves=5, seed=11)
    for i, state in enumerate(states):
        root, v0 = reference_tree(sim, state, evaluate, 30)
        children = root.children.values()
        expected = (v0 + sum(c.value_sum for c in children)) / (1 + sum(c.visits for c in children))
        assert res.root_value[i] == pytest.approx(expected, abs=1e-5), (i, str(state))
        assert res.pred_value[i] == pytest.approx(v0, abs=1e-6)


def _positions(spec: OpenSpielEnvSpec, count: int, max_moves: int, seed: int) -> list[object]:
    """Non-terminal positions after 0 … max_moves random moves."""
    sim, rng, out = spec.make_simulator(), np.random.default_rng(seed), []
    while len(out) < count:
        state = sim.new_state()
        for _ in range(int(rng.integers(0, max_moves + 1))):
            sim.step([state], np.array([rng.choice(state.legal_actions())]))
            if state.is_terminal():
                break
        if not state.is_terminal():
            out.append(state)
    return out


@pytest.mark.parametrize(("game", "max_moves", "simulations"), [("tic_tac_toe", 7, 60), ("connect_four", 12, 40)])
def test_the_search_visits_as_lightzeros_alphazero_search(game: str, max_moves: int, simulations: int) -> None:
    """Identical root visit counts, every position of the batch (terminal leaves included: the
    tic-tac-toe positions reach the end of the game within the search)."""
    spec = OpenSpielEnvSpec.load(game)
    cfg = AlphaZeroPolicyConfig(num_simulations=simulations, eval_num_simulations=simulations)
    policy = AlphaZeroPolicy(cfg, spec, seed=0)
    evaluate = _network(spec.num_actions)
    policy.evaluate = evaluate  # type: ignore[method-assign]
    states = _positions(spec, 12, max_moves, seed=3)
    sim = spec.make_simulator()
    view = sim.observe(states)
    result, _, _ = policy.search(view.obs, view.legal, view.to_play, states, simulations, add_noise=False,
                                 deterministic=True)
    for i, state in enumerate(states):
        expected = lightzero_search(sim, state, evaluate, simulations, spec.num_actions)
        assert result.visit_counts[i].tolist() == expected, (i, str(state))


def test_eval_plays_the_most_visited_move_with_lightzeros_search() -> None:
    """Eval mode acts on that search: the most visited move, its visit distribution as ``visit_dist``."""
    sim, evaluate, states, res = _eval_act_on_tictactoe(simulations=50, positions=6, max_moves=6, seed=5)
    for i, state in enumerate(states):
        visits = np.asarray(lightzero_search(sim, state, evaluate, 50, len(res.visit_dist[i])), np.float64)
        np.testing.assert_allclose(res.visit_dist[i], visits / visits.sum(), rtol=1e-6)
        assert int(res.action[i]) == int(np.argmax(visits))


def _batch(rng: np.random.Generator, spec: OpenSpielEnvSpec, B: int, all_legal: bool) -> Batch:
    A = spec.num_actions
    legal = np.ones((B, A), bool) if all_legal else rng.random((B, A)) < 0.6
    legal[np.arange(B), rng.integers(0, A, B)] = True
    pi = np.where(legal, rng.random((B, A)), 0.0)
    pi = (pi / pi.sum(1, keepdims=True)).astype(np.float32)
    return Batch(obs=rng.integers(0, 2, (B, 1, *spec.obs_shape)).astype(np.float32),
                 actions=np.zeros((B, 0), np.int64), mask=np.ones((B, 1), np.float32),
                 target_reward=np.zeros((B, 0), np.float32),
                 target_value=rng.choice([-1.0, 0.0, 1.0], (B, 1)).astype(np.float32), target_policy=pi[:, None],
                 weights=np.ones(B, np.float32), indices=np.arange(B), to_play=np.ones((B, 1), np.int64),
                 legal=legal[:, None])


@pytest.mark.parametrize("all_legal", [True, False], ids=["all_legal", "masked"])
def test_the_learner_step_is_lightzeros(all_legal: bool) -> None:
    """One step from the same weights: the same losses and the same new weights as LightZero's
    update written out with torch (value weight 0.7 and entropy weight 0.1 so that every term
    counts; a clip of 0.05 that binds). With every move legal this is LightZero's formula exactly;
    with illegal moves our softmax is over the legal ones (documented difference)."""
    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    cfg = AlphaZeroPolicyConfig(value_loss_weight=0.7, entropy_loss_weight=0.1, grad_clip=0.05, lr=3e-3,
                                weight_decay=1e-4, optimizer="adam")
    model = AlphaZeroNet(spec.obs_shape, spec.num_actions, AlphaZeroModelConfig())
    with torch.no_grad():  # away from the zero-initialised output layers
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    reference = copy.deepcopy(model)
    batch = _batch(np.random.default_rng(1), spec, 32, all_legal)
    metrics, _ = AlphaZeroLearner(model, cfg).step(batch)

    reference.train()
    logits, v = reference(torch.as_tensor(batch.obs[:, 0]))
    legal = torch.as_tensor(batch.legal[:, 0])
    log_p = torch.where(legal, torch.log_softmax(logits.masked_fill(~legal, -1e9), -1), 0.0)  # over the legal moves
    p = torch.where(legal, log_p.exp(), 0.0)
    pi, z = torch.as_tensor(batch.target_policy[:, 0]), torch.as_tensor(batch.target_value[:, 0])
    policy_loss = -(pi * log_p).sum(-1).mean()
    value_loss = torch.nn.functional.mse_loss(v, z)
    ent = -(p * log_p).sum(-1).mean()
    total = 0.7 * value_loss + policy_loss - 0.1 * ent
    optimizer = torch.optim.Adam(reference.parameters(), lr=3e-3, weight_decay=1e-4)
    optimizer.zero_grad()
    total.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.05)
    optimizer.step()

    assert norm > 0.05  # the clip binds
    target_entropy = torch.special.entr(pi).sum(-1).mean()
    priority = ((v.detach() - z).abs() + 1e-6).mean()
    for name, want in [("loss_total", total), ("loss_policy", policy_loss), ("loss_value", value_loss),
                       ("policy_entropy", ent), ("grad_norm", norm),
                       # named and computed as the other algorithms' (docs/metrics.md)
                       ("target_policy_entropy", target_entropy), ("priority_mean", priority)]:
        assert metrics[f"train/{name}"] == pytest.approx(want.item(), rel=1e-5, abs=1e-6), name
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize(("simulations", "expected"), [(25, 100), (50, 200), (300, 800)])
def test_eval_simulations_default_to_lightzeros_rule(simulations: int, expected: int) -> None:
    """Without ``eval_num_simulations`` eval mode searches min(800, 4·num_simulations) (LightZero's
    AlphaZero, SPEC §5.2), not a fixed 100; a value that is set wins."""
    assert AlphaZeroPolicyConfig(num_simulations=simulations).eval_simulations == expected
    assert AlphaZeroPolicyConfig(num_simulations=simulations, eval_num_simulations=7).eval_simulations == 7


def test_eval_mode_searches_the_eval_simulations() -> None:
    spec = OpenSpielEnvSpec.load("tic_tac_toe")
    policy = AlphaZeroPolicy(AlphaZeroPolicyConfig(num_simulations=2), spec, seed=0)
    state = spec.make_simulator().new_state()
    view = spec.make_simulator().observe([state])
    seen = []
    real = policy.search
    policy.search = lambda *a, **k: seen.append(a[4]) or real(*a, **k)  # type: ignore[method-assign]
    for mode in ("collect", "eval"):
        policy.act(view.obs, view.legal, view.to_play, mode=mode, env_ids=np.zeros(1, np.int64), states=[state])
    assert seen == [2, 8]
