"""The versus evaluator on real tic-tac-toe: the perfect player never loses to random play from
either side, a first-legal-move agent loses to perfect play, rates per opponent and side sum to 1,
labels, reproducible seeding across evaluations and resumes, and the shared best/stop/state rules."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from board_fakes import BotAgent, FirstLegalAgent, ScriptedSpec  # noqa: E402
from worker_fakes import StubRun  # noqa: E402

from lzk_envs.openspiel import OpenSpielEnvSpec  # noqa: E402
from lzk_workers.opponents import OpponentSpec, parse_opponents  # noqa: E402
from lzk_workers.plugin import VersusEvaluatorConfig, make_versus_evaluator  # noqa: E402
from lzk_workers.versus_evaluator import VersusEvaluator  # noqa: E402

RATES = ("win_rate", "draw_rate", "loss_rate")


@pytest.fixture(scope="module")
def ttt() -> OpenSpielEnvSpec:
    return OpenSpielEnvSpec.load("tic_tac_toe")


def evaluator(spec, opponents: list[dict], games: int = 10, envs: int = 4, seed: int = 7) -> VersusEvaluator:
    specs, problems = parse_opponents(opponents)
    assert not problems
    return VersusEvaluator(spec, envs=envs, games=games, opponents=specs, seed=0, opponent_seed=seed,
                           every_train_iters=100, stop_value=1.0)


def rates(m: dict[str, float], prefix: str) -> list[float]:
    return [m[f"{prefix}/{r}"] for r in RATES]


def test_perfect_agent_never_loses_to_random_from_either_side(ttt: OpenSpielEnvSpec) -> None:
    ev = evaluator(ttt, [{"name": "random"}], games=30)
    agent = BotAgent(ttt.make_opponent("perfect", {}, 1))
    m = ev.evaluate(agent)
    for prefix in ("eval/vs_random/first", "eval/vs_random/second", "eval/vs_random"):
        assert sum(rates(m, prefix)) == pytest.approx(1.0) and m[f"{prefix}/loss_rate"] == 0.0
    assert m["eval/vs_random/first/win_rate"] > 0.7  # and it does beat random play
    assert m["eval/episodes"] == 60 and m["eval/return_min"] >= 0 and m["eval/return_mean"] > 0.5
    assert m["eval/return_mean"] == pytest.approx(m["eval/vs_random/win_rate"] - m["eval/vs_random/loss_rate"])
    assert {c["mode"] for c in agent.calls} == {"eval"}
    assert agent.resets[0] == ([0, 1, 2, 3], "eval")  # each side starts from fresh games and a reset policy
    assert m["eval/seconds"] > 0 and 5 <= m["eval/episode_length_mean"] <= 9


def test_first_legal_agent_loses_to_perfect_play(ttt: OpenSpielEnvSpec) -> None:
    """As x it plays 0, 1, 3 and perfect o wins every game (4, 2, then 6); as o it never wins."""
    m = evaluator(ttt, [{"name": "perfect"}], games=8).evaluate(FirstLegalAgent())
    assert rates(m, "eval/vs_perfect/first") == [0.0, 0.0, 1.0]
    assert m["eval/vs_perfect/second/win_rate"] == 0.0 and sum(rates(m, "eval/vs_perfect/second")) == pytest.approx(1)
    assert m["eval/vs_perfect/loss_rate"] >= 0.5 and m["eval/return_max"] <= 0 and m["eval/return_mean"] <= -0.5


def test_metric_names_labels_and_counts(ttt: OpenSpielEnvSpec) -> None:
    ev = evaluator(ttt, [{"name": "random", "label": "rnd"}, {"name": "mcts", "simulations": 20}, {"name": "random"}],
                   games=3, envs=2)
    m = ev.evaluate(FirstLegalAgent())
    expected = {"eval/return_mean", "eval/return_std", "eval/return_min", "eval/return_max", "eval/episodes",
                "eval/episode_length_mean", "eval/seconds", "eval/index"}
    for label in ("rnd", "mcts20", "random"):
        expected |= {f"eval/vs_{label}/{side}{r}" for side in ("first/", "second/", "") for r in RATES}
    assert set(m) == expected and m["eval/episodes"] == 18
    for label in ("rnd", "mcts20", "random"):
        for side in ("first", "second"):
            assert sum(rates(m, f"eval/vs_{label}/{side}")) == pytest.approx(1.0)
        both = (np.array(rates(m, f"eval/vs_{label}/first")) + rates(m, f"eval/vs_{label}/second")) / 2
        assert rates(m, f"eval/vs_{label}") == pytest.approx(both.tolist())  # equal games per side


def _games(ev: VersusEvaluator) -> tuple[dict[str, float], list[tuple[int, ...]]]:
    """One evaluation: its metrics (without seconds) and every position the agent was asked about."""
    agent = FirstLegalAgent()
    m = ev.evaluate(agent)
    m.pop("eval/seconds")
    return m, [h for call in agent.calls for h in call["histories"]]


def test_evaluations_are_reproducible_from_the_seed_and_the_index(ttt: OpenSpielEnvSpec) -> None:
    a, b = evaluator(ttt, [{"name": "random"}]), evaluator(ttt, [{"name": "random"}])
    a0, b0 = _games(a), _games(b)
    assert a0 == b0  # same seed, same evaluation index: the same games
    a1 = _games(a)
    assert a1[1] != a0[1]  # the next evaluation plays other games
    assert a.state_dict()["evaluations"] == 2
    resumed = evaluator(ttt, [{"name": "random"}])
    resumed.load_state_dict({**b.state_dict()})  # b did one evaluation: resume continues with index 1
    assert _games(resumed) == a1
    assert _games(evaluator(ttt, [{"name": "random"}], seed=8))[1] != a0[1]  # another run seed, other games


def test_best_stop_and_state_follow_the_episodes_evaluator(ttt: OpenSpielEnvSpec) -> None:
    ev = evaluator(ttt, [{"name": "random"}], games=2, envs=2)
    assert [ev.should_eval(i) for i in (0, 0, 50, 100, 150, 200)] == [True, False, False, True, False, True]
    assert ev.is_best(-0.5) and not ev.is_best(-0.5) and ev.is_best(0.0)
    assert not ev.reached(0.5) and ev.reached(1.0)
    ev.evaluate(FirstLegalAgent())
    state = ev.state_dict()
    assert state == {"best_return": 0.0, "last_eval_iter": 200, "evaluations": 1}
    fresh = evaluator(ttt, [{"name": "random"}], games=2, envs=2)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and not fresh.should_eval(250) and not fresh.is_best(0.0)
    fresh.close()


def test_factory_seeds_and_checks_opponents_at_build(ttt: OpenSpielEnvSpec) -> None:
    spec, run = ScriptedSpec(ttt), StubRun(seed=2)
    cfg = VersusEvaluatorConfig(games=2, envs=1, opponents=[{"name": "random"}, {"name": "perfect"}])
    ev = make_versus_evaluator(cfg, run, env_spec=spec, frame_stack=1)
    assert [name for name, _, _ in spec.made] == ["random", "perfect"]  # built once at construction
    assert ev.opponent_seed == run.seed("evaluator", "opponents") and ev.player.num_envs == 1
    ev.evaluate(FirstLegalAgent())
    seeds = [seed for _, _, seed in spec.made[2:]]
    assert len(seeds) == 4 and len(set(seeds)) == 4  # one opponent per (opponent, side), each its own seed
    from lzkernel import ConfigError

    with pytest.raises(ConfigError, match="unknown opponent 'alphabeta'"):
        VersusEvaluator(ttt, envs=1, games=1, opponents=[OpponentSpec("alphabeta", {}, "a")], seed=0,
                        opponent_seed=0, every_train_iters=1)
    with pytest.raises(ValueError, match="labels must differ"):
        VersusEvaluator(ttt, envs=1, games=1, opponents=[OpponentSpec("random", {}, "a")] * 2, seed=0,
                        opponent_seed=0, every_train_iters=1)
