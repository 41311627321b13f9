"""The episodes evaluator against a scripted vector env and a recording policy."""
from __future__ import annotations

import math

import numpy as np
import pytest
from worker_fakes import FakeEnvSpec, RecordingPolicy, StubRun, default_length

from lzkernel import StopRequested
from lzk_workers.evaluator import EpisodeEvaluator, evaluation_seed
from lzk_workers.plugin import EpisodeEvaluatorConfig, make_episode_evaluator

KEYS = {"eval/return_mean", "eval/return_std", "eval/return_min", "eval/return_max", "eval/episodes",
        "eval/episode_length_mean", "eval/seconds", "eval/index"}


def make(spec: FakeEnvSpec, envs: int = 3, episodes: int = 10, stop_value: float | None = None) -> EpisodeEvaluator:
    return EpisodeEvaluator(spec, envs=envs, episodes=episodes, seed=1, every_train_iters=200, stop_value=stop_value)


@pytest.mark.parametrize(
    "iters, expected",
    [
        # fresh evaluator: iteration 0 evaluates once, then at least 200 iterations apart
        ([0, 0, 100, 199, 200, 200, 399, 450, 649, 650], [1, 0, 0, 0, 1, 0, 0, 1, 0, 1]),
        # train_iter jumps by update_per_collect: evaluations fall at irregular iterations
        ([100, 300, 400, 500, 600, 700], [0, 1, 0, 1, 0, 1]),
        ([250, 260, 449, 450], [1, 0, 0, 1]),
    ],
)
def test_should_eval_table(spec: FakeEnvSpec, iters: list[int], expected: list[int]) -> None:
    ev = make(spec)
    assert [int(ev.should_eval(it)) for it in iters] == expected


def expected_returns(quota: list[int], first_k: int = 0) -> list[float]:
    """Scripted returns: episode k of env i has length L and return 1 + ... + L."""
    out = []
    for i, q in enumerate(quota):
        for k in range(first_k, first_k + q):
            n = default_length(i, k)
            out.append(n * (n + 1) / 2)
    return out


def test_exact_episodes_greedy_mode_and_stats(spec: FakeEnvSpec) -> None:
    ev = make(spec)
    policy = RecordingPolicy()
    m = ev.evaluate(policy)
    assert set(m) == KEYS and m["eval/episodes"] == 10
    returns = expected_returns([4, 3, 3])
    assert m["eval/return_mean"] == pytest.approx(np.mean(returns))
    assert m["eval/return_std"] == pytest.approx(np.std(returns))
    assert (m["eval/return_min"], m["eval/return_max"]) == (min(returns), max(returns))
    assert {c["mode"] for c in policy.calls} == {"eval"}
    assert policy.resets[0] == ([0, 1, 2], "eval")  # the policy's eval state is reset first
    assert sum(len(ids) for ids, _ in policy.resets[1:]) == 10  # then once per finished episode
    venv = spec.made[0]
    assert venv.seed == evaluation_seed(1, 0) and m["eval/index"] == 0 and venv.steps_per_env.sum() == sum(
        default_length(i, k) for i, q in enumerate([4, 3, 3]) for k in range(q))


def test_every_evaluation_plays_fresh_envs_seeded_by_its_index(spec: FakeEnvSpec) -> None:
    ev = make(spec, envs=2, episodes=3)
    first = ev.evaluate(RecordingPolicy())
    m = ev.evaluate(RecordingPolicy())
    assert [v.seed for v in spec.made] == [evaluation_seed(1, 0), evaluation_seed(1, 1)]
    assert [v.resets for v in spec.made] == [1, 1] and spec.made[0].closed
    assert (first["eval/index"], m["eval/index"], ev.evaluations) == (0, 1, 2)
    # fresh envs: the scripted episodes start again at k = 0
    assert m["eval/episodes"] == 3 and m["eval/return_mean"] == first["eval/return_mean"]
    ev.evaluations = 0  # replaying evaluation 0 (what lzkernel eval does) plays its envs again
    assert ev.evaluate(RecordingPolicy())["eval/return_mean"] == first["eval/return_mean"]
    assert spec.made[-1].seed == evaluation_seed(1, 0)


def test_fewer_episodes_than_envs(spec: FakeEnvSpec) -> None:
    m = make(spec, envs=3, episodes=2).evaluate(RecordingPolicy())
    assert m["eval/episodes"] == 2 and spec.made[0].num_envs == 2


def test_best_stop_and_state(spec: FakeEnvSpec) -> None:
    ev = make(spec, stop_value=195.0)
    assert [ev.is_best(x) for x in (10.0, 5.0, 10.0, 11.0)] == [True, False, False, True]
    assert (ev.reached(194.9), ev.reached(195.0)) == (False, True)
    assert not make(FakeEnvSpec()).reached(1e9)  # no stop_value: never
    ev.should_eval(400)
    state = ev.state_dict()
    assert state == {"best_return": 11.0, "last_eval_iter": 400, "evaluations": 0}
    other = make(FakeEnvSpec())
    assert other.state_dict()["best_return"] is None
    other.load_state_dict(state)
    assert not other.is_best(11.0) and not other.should_eval(400) and other.should_eval(600)
    other.load_state_dict({"best_return": None, "last_eval_iter": -1})
    assert other.best_return == -math.inf and other.should_eval(0)


def test_factory(spec: FakeEnvSpec) -> None:
    run = StubRun()
    ev = make_episode_evaluator(EpisodeEvaluatorConfig(stop_value=200.0), run, env_spec=spec, frame_stack=2)
    assert spec.made[0].seed == evaluation_seed(run.seed("evaluator"), 0) and spec.made[0].num_envs == 3
    assert ev.episodes == 10 and ev.every_train_iters == 200 and ev.reached(200.0)
    policy = RecordingPolicy()
    ev.evaluate(policy)
    assert policy.calls[0]["obs"].shape == (3, 6)  # frame_stack reaches the acting observations


def test_a_stop_signal_abandons_the_evaluation_and_it_is_due_again(spec: FakeEnvSpec) -> None:
    """The run's stop flag, read before every step, raises StopRequested part-way: nothing is
    counted, the iteration should_eval recorded is due again, and the next evaluate plays
    evaluation 0 from fresh envs as if the abandoned one never ran."""
    run = StubRun()
    ev = make_episode_evaluator(EpisodeEvaluatorConfig(every_train_iters=200), run, env_spec=spec, frame_stack=1)
    steps = 0

    class Signalled(RecordingPolicy):
        def act(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            nonlocal steps
            steps += 1
            if steps == 3:
                run.stop_requested = True  # what the SIGTERM handler does
            return super().act(*args, **kwargs)

    assert ev.should_eval(0) and not ev.should_eval(0)
    with pytest.raises(StopRequested):
        ev.evaluate(Signalled())
    assert steps == 3 and ev.evaluations == 0 and ev.state_dict()["last_eval_iter"] == -1
    run.stop_requested = False  # a resumed run
    assert ev.should_eval(0)
    replayed = ev.evaluate(RecordingPolicy())
    fresh = make(FakeEnvSpec()).evaluate(RecordingPolicy())
    assert replayed["eval/index"] == 0 and replayed["eval/return_mean"] == fresh["eval/return_mean"]
    assert spec.made[-1].seed == evaluation_seed(ev.seed, 0)
