"""End to end: `lzkernel eval` (exact replay of ckpt/best, videos read back and counted, bad input),
`lzkernel play` (a person against a tic-tac-toe agent) and `lzkernel plot` (figure objects and PNG
sizes) on tiny real runs."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = [
    "run.max_env_steps=300", "run.progress=false", "run.threads=1", "run.checkpoint_every=20", "run.log_every=10",
    "policy.num_simulations=4", "policy.batch_size=32", "policy.model.latent_dim=16", "policy.model.proj_hidden=16",
    "policy.model.proj_out=16", "policy.model.pred_hidden=16", "policy.model.pred_out=16",
    "collector.envs=2", "collector.n_episode=2", "update_schedule.updates_per_collect=10",
    "evaluator.envs=2", "evaluator.episodes=3", "evaluator.every_train_iters=10",
]
PONG = [
    "run.max_env_steps=120", "run.progress=false", "run.threads=1", "run.checkpoint_every=10",
    "env.max_episode_steps=40", "env.frame_size=32", "update_schedule.ratio=0.05",
    "policy.num_simulations=2", "policy.batch_size=16", "policy.model.latent_dim=8", "policy.model.proj_hidden=16",
    "policy.model.proj_out=16", "policy.model.pred_hidden=16", "policy.model.pred_out=16",
    "collector.envs=2", "collector.n_episode=2", "evaluator.envs=1", "evaluator.episodes=1",
    "evaluator.every_train_iters=10",
]


def lzk(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lzkernel", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):  # noqa: ANN201 - a callable
    """``lzkernel`` in this process (no interpreter start): (exit code, stdout, stderr). torch's
    thread count, which a run's ``run.threads`` sets, is restored afterwards."""
    import torch

    from lzkernel.cli import main

    threads = torch.get_num_threads()

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    yield call
    torch.set_num_threads(threads)


def train(config: str, out: Path, overrides: list[str]) -> Path:
    proc = lzk("run", f"configs/{config}.yaml", f"run.out_dir={out}", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two seeds of one tiny CartPole MuZero run."""
    root = tmp_path_factory.mktemp("cartpole")
    return [train("cartpole_muzero", root / f"seed{s}", [*CARTPOLE, f"run.seed={s}"]) for s in (0, 1)]


@pytest.fixture(scope="module")
def pong(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("ale_py")
    return train("atari_pong_muzero", tmp_path_factory.mktemp("pong") / "run", PONG)


TICTACTOE = [
    "run.max_env_steps=150", "run.progress=false", "run.threads=1", "run.checkpoint_every=10",
    "policy.num_simulations=4", "policy.eval_num_simulations=4", "policy.batch_size=32", "policy.model.channels=8",
    "policy.model.num_res_blocks=1", "collector.envs=2", "collector.n_episode=2", "evaluator.envs=2",
    "evaluator.games=1", "evaluator.opponents=[{name: random}]", "evaluator.every_train_iters=1000",
]


@pytest.fixture(scope="module")
def tictactoe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyspiel")
    return train("tictactoe_alphazero", tmp_path_factory.mktemp("tictactoe") / "run", TICTACTOE)


def evals(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["event"] == "eval"]


def test_eval_of_ckpt_best_replays_the_recorded_return_exactly(cartpole: list[Path], tmp_path: Path) -> None:
    run = cartpole[0]
    best = json.loads((run / "ckpt" / "best" / "meta.json").read_text())
    proc = lzk("eval", str(run), "--checkpoint", "best", "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    recorded = [r for r in evals(run) if r["eval/index"] == report["evaluation_index"]]
    assert len(recorded) == 1 and recorded[0]["train_iter"] == best["train_iter"]
    assert report["metrics"]["eval/return_mean"] == recorded[0]["eval/return_mean"]  # exact, not approx
    for k in ("std", "min", "max"):
        assert report["metrics"][f"eval/return_{k}"] == recorded[0][f"eval/return_{k}"]
    assert "(identical)" in proc.stdout
    # evaluations differ from each other (so the match above is not a coincidence of equal episodes)
    assert len({r["eval/episode_length_mean"] for r in evals(run)}) > 1


def test_eval_last_and_another_seed(cartpole: list[Path], tmp_path: Path, cli) -> None:  # noqa: ANN001
    code, out, err = cli("eval", str(cartpole[0]), "--seed", "7", "--episodes", "2", "--json", str(tmp_path / "r.json"))
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["seed"] == 7 and report["recorded"] is None and report["metrics"]["eval/episodes"] == 2
    assert "return mean" in out
    # Another batch of episodes is not a replay either: no comparison with the recorded return.
    code, out, err = cli("eval", str(cartpole[0]), "--checkpoint", "best", "--episodes", "3")
    assert code == 0 and "return mean" in out and "recorded at" not in out, out + err[-2000:]


def test_pong_eval_writes_a_video_with_one_frame_per_step(pong: Path, tmp_path: Path, cli) -> None:  # noqa: ANN001
    iio2 = pytest.importorskip("imageio.v2")
    iio3 = pytest.importorskip("imageio.v3")
    mp4, gif = tmp_path / "pong.mp4", tmp_path / "pong.gif"
    code, _, err = cli("eval", str(pong), "--video", str(mp4), "--json", str(tmp_path / "r.json"))
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    reader = iio2.get_reader(mp4)
    frames = [f for f in reader]
    assert len(frames) == report["video"]["frames"] == report["metrics"]["eval/episode_length_mean"] == 40
    assert frames[0].shape == (210, 160, 3) and reader.get_meta_data()["fps"] == 15
    assert len({f.tobytes() for f in frames}) > 1  # the game moves
    code, _, err = cli("eval", str(pong), "--checkpoint", "best", "--video", str(gif))
    assert code == 0, err[-3000:]
    # Pillow merges identical consecutive GIF frames: at most one per step, and a playable file
    assert 1 <= iio3.imread(gif, index=None).shape[0] <= 40
    from lzkernel import api  # the Python API records the same video

    again = api.evaluate(pong, video=tmp_path / "api.mp4")
    assert again["video"]["frames"] == report["video"]["frames"] and (tmp_path / "api.mp4").is_file()


def test_the_api_agent_acts_on_raw_frames_as_the_evaluator_does(pong: Path) -> None:
    """The evaluator's calls of the policy in one Pong evaluation (frame stack 4), replayed
    through ``lzkernel.api.Agent`` from the newest frame of each call only, as uint8: the Agent
    builds the same stacked observations and plays the same actions."""
    from lzkernel import api, encode_frames
    from lzkernel.evaluate import load_policy
    from lzkernel.pluginmanager import Kernel

    loaded = load_policy(Kernel(), str(pong))
    policy, spec = loaded.policy, loaded.env_spec
    stack = int(policy.target_spec.frame_stack)
    events: list[tuple] = []

    class Recorder:  # the policy, with its calls written down
        target_spec = policy.target_spec

        def __init__(self, log: list) -> None:
            self.log = log

        def act(self, obs: np.ndarray, legal: np.ndarray, to_play: np.ndarray, **kw: object):  # noqa: ANN201
            res = policy.act(obs, legal, to_play, **kw)
            self.log.append(("act", np.asarray(kw["env_ids"]).copy(), obs.copy(), legal.copy(), res.action.copy()))
            return res

        def reset_envs(self, env_ids: list[int], mode: str) -> None:
            self.log.append(("reset", list(env_ids)))
            policy.reset_envs(env_ids, mode)

    evaluator = loaded.run.build("evaluator", env_spec=spec, frame_stack=stack)
    try:
        evaluator.evaluate(Recorder(events))
    finally:
        evaluator.close()
    assert stack > 1 and sum(e[0] == "act" for e in events) >= 40
    replayed: list[tuple] = []
    agent = api.Agent(Recorder(replayed), spec, num_envs=evaluator.player.num_envs)
    for event in events:
        if event[0] == "reset":
            agent.reset(event[1])
            continue
        ids, stacked, legal, actions = event[1:]
        newest = stacked.reshape(len(ids), stack, *spec.obs_shape)[:, -1]
        got = agent.act(encode_frames(newest, spec.frame_scale), legal=legal, env_ids=ids)
        assert np.array_equal(got, actions) and np.array_equal(replayed[-1][2], stacked)


def test_cartpole_eval_writes_a_video_of_env_0s_episode(cartpole: list[Path], tmp_path: Path, cli) -> None:  # noqa: ANN001
    """A gymnasium env renders through ``render_mode="rgb_array"`` (CartPole draws with pygame,
    which the ``video`` extra installs): one frame per step of env 0's first episode."""
    pytest.importorskip("pygame")
    iio2 = pytest.importorskip("imageio.v2")
    mp4 = tmp_path / "cartpole.mp4"
    code, _, err = cli("eval", str(cartpole[0]), "--video", str(mp4), "--json", str(tmp_path / "r.json"))
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    frames = [f for f in iio2.get_reader(mp4)]  # list() would ask len(): inf for a stream
    assert len(frames) == report["video"]["frames"] >= report["metrics"]["eval/return_min"] >= 1
    assert frames[0].shape == (400, 600, 3)  # the env's own picture, not resized
    assert len({f.tobytes() for f in frames}) > 1  # the pole moves


def test_bad_input_exits_2_with_one_line(cartpole: list[Path], tmp_path: Path, cli) -> None:  # noqa: ANN001
    empty = tmp_path / "empty"
    (empty / "ckpt").mkdir(parents=True)
    cases = {
        "no such": ("eval", str(tmp_path / "missing")),
        "no complete checkpoint": ("eval", str(empty)),
        "no checkpoint at": ("eval", str(cartpole[0]), "--checkpoint", str(tmp_path / "nope")),
        "lzkernel plugins": ("eval", str(cartpole[0]), "-p", "no:muzero"),
        ".mp4 or .gif": ("eval", str(cartpole[0]), "--video", str(tmp_path / "v.avi")),
        "does not exist": ("eval", str(cartpole[0]), "--json", str(tmp_path / "nodir" / "r.json")),
        "needs --video": ("eval", str(cartpole[0]), "--video-episodes", "2"),
        "logs no such metric": ("plot", str(cartpole[0]), "--metric", "train/no_such", "-o", str(tmp_path / "p.png")),
        "logs no such metric (did you mean 'eval/return_mean'?)": ("plot", str(cartpole[0]), "--metric",
                                                                   "eval/return_maen", "-o", str(tmp_path / "p.png")),
        "no such run directory": ("plot", str(tmp_path / "missing"), "-o", str(tmp_path / "p.png")),
    }
    if importlib.util.find_spec("pygame") is None:  # CartPole draws with pygame
        cases["cannot render"] = ("eval", str(cartpole[0]), "--video", str(tmp_path / "v.mp4"))
    for needle, args in cases.items():
        code, _, err = cli(*args)
        assert code == 2, (needle, err[-2000:])
        errors = [line for line in err.splitlines() if line.startswith("lzkernel: error:")]
        assert len(errors) == 1 and needle in err and "Traceback" not in err, (needle, err[-2000:])


def test_parse_move_takes_numbers_names_and_bare_coordinates() -> None:
    from lzkernel.play import parse_move

    names = {0: "x(0,0)", 4: "x(1,1)", 8: "x(2,2)"}
    assert [parse_move(t, names) for t in ("4", " X(1, 1) ", "1,1", "(2,2)", "3", "x(0,1)", "")] == [4, 4, 4, 8, None,
                                                                                                 None, None]
    assert parse_move("3", {1: "o3", 3: "o1"}) == 3  # a number first: move 3, not the move named o3
    assert parse_move("o3", {1: "o3", 3: "o1"}) == 1
    for typed in ("--4", "-4", "\u00b2", "", "  ", "()"):  # nothing typed, or not ASCII digits: no move, no crash
        assert parse_move(typed, names) is None, typed
    assert parse_move("2,2", {8: "x(2,2)"}) == 8  # the last legal move too
    go = {24: "B e5", 25: "B PASS"}  # the mark is the letters all names start with, not every letter
    assert [parse_move(t, go) for t in ("", "e5", "pass", "b pass", "25")] == [None, 24, 25, 25, 25]


def test_play_tictactoe_against_the_agent(tictactoe: Path) -> None:
    """Two games, the person first then second, moving to the lowest free cell: every game ends
    with a result, the person's moves are on the board, occupied cells are refused, and q stops."""
    from lzkernel.pluginmanager import Kernel
    from lzkernel.play import play

    lines: list[str] = []
    boards: list[str] = []

    def lowest_free(prompt: str) -> str:  # the prompt lists the legal moves: "your move [0=x(0,0)  1=...]: "
        return prompt.split("[", 1)[1].split("=", 1)[0]

    def write(text: str) -> None:
        lines.append(text)
        if set(text) <= set("xo.\n") and "\n" in text:
            boards.append(text)

    results = play(Kernel(), str(tictactoe), games=2, read=lowest_free, write=write)
    assert results["played"] == 2 and results["win"] + results["draw"] + results["loss"] == 2
    assert sum(line in ("you win", "a draw", "the agent wins") for line in lines) == 2
    assert lines[0] == "game 1 of 2: you are player 1, first to move" and boards[0] == "...\n...\n..."
    assert boards[1].replace("\n", "")[0] == "x"  # the person's first move, cell 0, then the agent's reply
    assert any(line.startswith("game 2 of 2: you are player 2") for line in lines)
    assert sum(line.startswith("the agent plays") for line in lines) >= 4

    answers = iter(["0", "0", "q"])  # cell 0 twice: the second time it is taken
    lines.clear()
    results = play(Kernel(), str(tictactoe), games=3, side="first", read=lambda _: next(answers), write=write)
    assert results == {"win": 0, "draw": 0, "loss": 0, "played": 0}
    assert any("'0' is not a legal move here" in line for line in lines) and lines[-2:] == ["stopped", "0 games: 0 won, 0 drawn, 0 lost"]


def test_play_through_the_cli_and_its_bad_input(tictactoe: Path, cartpole: list[Path]) -> None:
    proc = subprocess.run([sys.executable, "-m", "lzkernel", "play", str(tictactoe), "--side", "second"],
                          input="q\n", capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "the agent plays x(" in proc.stdout and "stopped" in proc.stdout, proc.stderr[-2000:]
    for args, needle in (((str(cartpole[0]),), "not a two-player board game"), ((str(tictactoe), "--games", "0"), "--games")):
        proc = lzk("play", *args)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("lzkernel: error:")]
        assert proc.returncode == 2 and len(errors) == 1 and needle in errors[0], proc.stderr[-2000:]


def test_plot_figure_series_and_png_size(cartpole: list[Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection

    from lzkernel import plot

    # Two seeds of one config: one median line and one min-max band per axis, bounded by the runs.
    fig = plot.plot_runs(cartpole)
    series = [plot.load_series(r, "eval/return_mean") for r in cartpole]
    for ax, (axis, _) in zip(fig.axes, plot.AXES):
        assert len(ax.lines) == 1 and len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
        y = ax.lines[0].get_ydata()
        grid, _, lo, hi = plot.band(series, axis)
        assert np.all(lo <= y) and np.all(y <= hi) and np.allclose(ax.lines[0].get_xdata(), grid)
    # The same runs as two configs (a metric name per run differs in config): two lines per axis.
    fig2 = plot.plot_runs([cartpole[0]], "train/loss_value")
    assert len(fig2.axes[0].lines) == 1
    out = tmp_path / "p.png"
    proc = lzk("plot", *map(str, cartpole), "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    import matplotlib.image

    h, w = matplotlib.image.imread(out).shape[:2]
    assert (w, h) == (int(plot.FIGSIZE[0] * plot.DPI), int(plot.FIGSIZE[1] * plot.DPI))


def test_plot_two_configs_draws_two_series(cartpole: list[Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lzkernel import plot

    # A copy of seed 1's run whose config differs in a learning option: another config, not a seed.
    other = tmp_path / "other"
    shutil.copytree(cartpole[1], other)
    config = (other / "config.yaml").read_text()
    (other / "config.yaml").write_text(config.replace("lr: 0.003", "lr: 0.001"))
    assert (other / "config.yaml").read_text() != config
    fig = plot.plot_runs([cartpole[0], other])
    for ax in fig.axes:
        assert len(ax.lines) == 2 and not ax.collections
        np.testing.assert_array_equal(ax.lines[1].get_ydata(), [r["eval/return_mean"] for r in evals(other)])
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["seed0", "other"]


def test_plot_time_to_solve_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lzkernel import plot

    files = sorted((ROOT / "benchmarks" / "results").glob("time_to_solve_*.json"))
    fig = plot.plot_time_to_solve(files)
    assert len(fig.axes[0].collections) == len(files)  # one scatter of seeds per config
    proc = lzk("plot", *map(str, files), "-o", str(tmp_path / "t.png"))
    assert proc.returncode == 0 and (tmp_path / "t.png").stat().st_size > 0


def test_eval_of_a_sweep_directory_evaluates_every_seed(tmp_path: Path) -> None:
    """`lzkernel eval SWEEP_DIR` (a `run --seeds` directory): each seed's last checkpoint, then the
    mean and spread over the seeds; --json holds one report per seed; --video needs one run."""
    sweep = tmp_path / "sweep"
    run = lzk("run", str(ROOT / "configs" / "cartpole_rezero_fast.yaml"), f"run.out_dir={sweep}", *CARTPOLE,
              "--seeds", "0", "1")
    assert run.returncode == 0, run.stderr[-3000:]
    proc = lzk("eval", str(sweep), "--episodes", "2", "--json", str(tmp_path / "eval.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads((tmp_path / "eval.json").read_text())
    assert [r["seed"] for r in reports] == [0, 1]
    means = [r["metrics"]["eval/return_mean"] for r in reports]
    assert f"2 seeds: return mean over seeds {np.mean(means):.3f}  std {np.std(means):.3f}" in proc.stdout
    bad = lzk("eval", str(sweep), "--video", str(tmp_path / "v.gif"))
    assert bad.returncode == 2 and "--video with the sweep" in bad.stderr


def test_eval_prints_what_the_evaluator_logged_and_its_own_scalars() -> None:
    """`lzkernel eval`'s lines show the common metrics an evaluator logged (no `nan` for those it
    did not) and a third-party evaluator's own scalars."""
    from lzkernel.evaluate import summary

    head = {"checkpoint": "r/ckpt/step_1", "train_iter": 1, "env_steps": 9, "evaluation_index": 0, "seed": 0}
    full = summary({**head, "metrics": {"eval/episodes": 2, "eval/episode_length_mean": 9.5, "eval/return_mean": 1.0,
                                        "eval/return_std": 0.5, "eval/return_min": 0.5, "eval/return_max": 1.5,
                                        "eval/index": 0, "eval/seconds": 0.1}})
    assert full[1:] == ["evaluation 0 (run seed 0): 2 episodes, mean length 9.5",
                        "return mean 1.000  std 0.500  min 0.500  max 1.500"]
    own = summary({**head, "metrics": {"eval/return_mean": 0.25, "eval/success_rate": 0.75, "eval/index": 0}})
    assert own[1:] == ["evaluation 0 (run seed 0)", "return mean 0.250", "success_rate 0.75"]
    assert not any("nan" in line for line in own)
    assert summary({**head, "metrics": {"eval/success_rate": 0.5}})[1:] == ["evaluation 0 (run seed 0)",
                                                                          "success_rate 0.5"]
