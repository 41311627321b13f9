"""Search with a real simulator through the general interface: minimax-optimal moves in
tic-tac-toe, terminal edges that stop the backup, per-node legal masks and players."""
from __future__ import annotations

import numpy as np
import pytest
from board_sim import TicTacToe, optimal_moves, position

import lzk_mcts
from lzk_mcts import SearchConfig, SimulatorModel, StepOutput

#: AlphaZero-style search constants: raw Q (no min-max), unvisited children score 0, γ = 1.
AZ = dict(discount=1.0, value_normalization="none", unvisited_value="zero")


def _uniform(obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """No knowledge: uniform priors, value 0 (the search must find the moves by itself)."""
    return np.zeros((len(obs), 9), np.float32), np.zeros(len(obs), np.float32)


#: Hand-made positions (moves in play order, X first) and what the side to move must see.
POSITIONS = {
    "win_in_one": "0314",  # X: 0, 1; O: 3, 4. X wins at 2 (O would win at 5)
    "forced_block": "0486",  # O threatens 6-4-2; X has no win: block at 2
    "fork": "0126",  # X: 0, 2; O: 1, 6. Only 8 makes two threats (4 and 5) at once
    "two_move_win": "16",  # X: 1; O: 6. Only 0 keeps the forced win (a fork a move later)
}


def _search(roots: list, sims: int, seed: int = 0) -> lzk_mcts.SearchResult:
    sim = TicTacToe()
    view = sim.observe(roots)
    model = SimulatorModel(sim, _uniform).begin(roots, sims)
    return lzk_mcts.search(model, np.zeros((len(roots), 9), np.float32), view.legal, view.to_play,
                           SearchConfig(num_simulations=sims, **AZ), np.random.default_rng(seed),
                           add_noise=False, deterministic=True, keep_tree=True)


def test_simulator_search_finds_the_minimax_moves() -> None:
    """All four positions searched together (one batched evaluator call per simulation): the most
    visited move is minimax-optimal, and the forced wins are valued as wins for the mover."""
    roots = [position(m) for m in POSITIONS.values()]
    res = _search(roots, 800)
    for name, root, visits, value in zip(POSITIONS, roots, res.visit_counts, res.root_value):
        assert int(visits.argmax()) in optimal_moves(root), (name, visits)
        assert value > 0.5, (name, value)  # every position is a forced win for the side to move
        assert visits.sum() == 800 and (visits[np.array(root[0]) != 0] == 0).all()  # occupied cells never visited


def test_the_roots_are_cloned_and_every_node_has_its_own_state() -> None:
    """The caller's states are untouched; each node's state is its parent's plus the edge's move
    (cloned and stepped once, not replayed from the root)."""
    roots = [position("0486"), position("16")]
    before = [[list(r[0]), r[1]] for r in roots]
    sim, B, S = TicTacToe(), len(roots), 50
    model = SimulatorModel(sim, _uniform).begin(roots, S)
    view = sim.observe(roots)
    t = lzk_mcts.search(model, np.zeros((B, 9), np.float32), view.legal, view.to_play,
                        SearchConfig(num_simulations=S, **AZ), np.random.default_rng(0), add_noise=False,
                        deterministic=True, keep_tree=True).tree
    assert roots == before
    for b in range(B):
        for node in range(1, S + 1):
            parent = t.parent_of(b, node)
            if parent < 0:
                continue
            action = int(np.flatnonzero(t.children[b, parent] == node)[0])
            child, par = (model.states.take(np.array([n * B + b]))[0][0] for n in (node, parent))
            assert [i for i in range(9) if child[i] != par[i]] == [action]


class _ChainModel:
    """Root (player 1) with two actions: 0 ends the game at once with reward 1 for the mover
    (the model's value 100 for that node must be ignored), 1 leads to a non-terminal node of
    value 0.25 whose children all have reward 0 and value 0.25. Records every step."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.parents: list[int] = []

    def __call__(self, parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        n = len(parent_slot)
        self.parents += [int(p) // self.batch for p in parent_slot]
        root_edge = parent_slot < self.batch  # the parent is a root
        terminal = root_edge & (action == 0)
        return StepOutput(reward=np.where(terminal, 1.0, 0.0).astype(np.float32),
                          value=np.where(terminal, 100.0, 0.25).astype(np.float32),
                          prior_logits=np.zeros((n, 2), np.float32),
                          discount=np.where(terminal, 0.0, 1.0).astype(np.float32))


def test_a_terminal_edge_stops_the_backup_and_is_never_expanded() -> None:
    model = _ChainModel(batch=1)
    S = 40
    res = lzk_mcts.search(model, np.zeros((1, 2), np.float32), np.ones((1, 2), bool), np.full(1, -1),
                          SearchConfig(num_simulations=S, **AZ), np.random.default_rng(0), add_noise=False,
                          deterministic=True, keep_tree=True)
    t = res.tree
    term = int(t.children[0, 0, 0])
    assert term > 0 and t.terminal[0, term] and t.discount[0, term] == 0.0
    assert (t.children[0, term] == -1).all()  # never expanded
    assert term not in model.parents  # never stepped from
    assert t.value_sum[0, term] == 0.0  # its value is 0 (not the model's 100)
    n_term = int(res.visit_counts[0, 0])
    assert n_term > 1  # revisited without a model step
    # Root value: each visit of the terminal edge backs up r = 1, each other simulation 0.25.
    assert res.root_value[0] == pytest.approx((n_term * 1.0 + (S - n_term) * 0.25) / (S + 1))
    assert len(model.parents) == S - (n_term - 1)  # one step per simulation, except terminal revisits


def test_illegal_interior_actions_are_never_selected_or_counted() -> None:
    """Random legal masks below the root: no tree ever has a child on an action that was illegal
    at its parent, and the step is never asked to play one."""
    rng = np.random.default_rng(4)
    B, A, S = 6, 5, 60
    masks: dict[int, np.ndarray] = {b: np.ones(A, bool) for b in range(B)}  # slot -> legal mask of that node

    def step(parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        n = len(parent_slot)
        for p, a in zip(parent_slot.tolist(), action.tolist()):
            assert masks[p][a], f"illegal action {a} at slot {p}"
        legal = rng.random((n, A)) < 0.4
        legal[np.arange(n), rng.integers(0, A, n)] = True
        for c, row in zip(child_slot.tolist(), legal):
            masks[c] = row
        return StepOutput(reward=rng.uniform(-1, 1, n).astype(np.float32),
                          value=rng.uniform(-1, 1, n).astype(np.float32),
                          prior_logits=rng.normal(size=(n, A)).astype(np.float32), legal=legal)

    res = lzk_mcts.search(step, rng.normal(size=(B, A)).astype(np.float32), np.ones((B, A), bool),
                          np.full(B, -1), SearchConfig(num_simulations=S), rng, add_noise=True,
                          deterministic=False, keep_tree=True)
    t = res.tree
    for b in range(B):
        for node in range(S + 1):
            slot = node * B + b
            if node > 0 and t.parent_of(b, node) < 0:
                continue
            illegal = ~t.legal[b, node]
            assert (t.children[b, node][illegal] == -1).all()
            assert (t.prior[b, node][illegal] == 0.0).all()
            np.testing.assert_array_equal(t.legal[b, node], masks[slot])


def test_the_player_to_move_comes_from_the_node() -> None:
    """Two-player root (player 1). Action 0 keeps player 1 on the move for the rest of the game,
    action 1 hands it to player 2 for good; every node is worth +0.5 to its player to move. From
    the root player's view action 0 is worth +0.5 and action 1 −0.5, so the search prefers 0 — a
    flip per ply would give the deeper nodes alternating signs instead."""

    players = {0: 1}  # slot -> player to move there

    def step(parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        n = len(parent_slot)
        # Root: action 0 keeps player 1 on the move, action 1 passes it; deeper: the same player again.
        to_play = np.array([(1 if a == 0 else 2) if p == 0 else players[p]
                            for p, a in zip(parent_slot.tolist(), action.tolist())], np.int64)
        players.update(zip(child_slot.tolist(), to_play.tolist()))
        value = np.full(n, 0.5, np.float32)  # +0.5 for the player to move there, at every node
        return StepOutput(reward=np.zeros(n, np.float32), value=value, prior_logits=np.zeros((n, 2), np.float32),
                          to_play=to_play)

    res = lzk_mcts.search(step, np.zeros((1, 2), np.float32), np.ones((1, 2), bool), np.array([1]),
                          SearchConfig(num_simulations=30, **AZ), np.random.default_rng(0), add_noise=False,
                          deterministic=True, keep_tree=True)
    t = res.tree
    c0, c1 = int(t.children[0, 0, 0]), int(t.children[0, 0, 1])
    assert t.to_play[0, c0] == 1 and t.to_play[0, c1] == 2
    for c in (c0, c1):  # each subtree's nodes all back up +0.5 from their (single) player's view
        assert t.value_sum[0, c] / t.visit[0, c] == pytest.approx(0.5)
    n0, n1 = res.visit_counts[0].tolist()
    assert n0 > 2 * n1  # Q(root, 0) = +0.5, Q(root, 1) = −0.5 for player 1
    assert res.root_value[0] == pytest.approx((0.5 * n0 - 0.5 * n1) / 31)


@pytest.mark.parametrize("parent_visits, expected", [("node", 7), ("children", 0)])
def test_the_first_descent_below_a_new_node_follows_its_priors(parent_visits: str, expected: int) -> None:
    """A root with one legal move; the node it leads to puts all its prior on action 7. On the
    second simulation the search goes below that node for the first time: with N = the node's own
    visits (1, its expansion; LightZero's AlphaZero) the prior decides and action 7 is expanded;
    with N = its children's visits (0; LightZero's MuZero) the exploration term is 0 for every
    child, all tie at the unvisited value, and the first legal action is taken."""
    A = 9
    steps: list[tuple[int, int]] = []

    def step(parent_slot: np.ndarray, action: np.ndarray, child_slot: np.ndarray) -> StepOutput:
        steps.extend(zip(parent_slot.tolist(), action.tolist()))
        n = len(parent_slot)
        logits = np.full((n, A), -20.0, np.float32)
        logits[:, 7] = 20.0
        return StepOutput(reward=np.zeros(n, np.float32), value=np.zeros(n, np.float32), prior_logits=logits)

    legal = np.zeros((1, A), bool)
    legal[0, 3] = True
    lzk_mcts.search(step, np.zeros((1, A), np.float32), legal, np.array([1]),
                    SearchConfig(num_simulations=2, parent_visits=parent_visits, **AZ), np.random.default_rng(0),
                    add_noise=False, deterministic=True)
    assert steps == [(0, 3), (1, expected)]  # slot 1 = node 1 of the single tree



def test_parent_visits_is_checked() -> None:
    with pytest.raises(ValueError, match="parent_visits"):
        SearchConfig(parent_visits="parent")
