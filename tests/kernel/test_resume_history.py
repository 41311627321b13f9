"""What a user reads after a resume: ``metrics.jsonl`` (through ``read_history``, as ``lzkernel
plot`` and ``lzkernel status`` read it) and TensorBoard hold one history, the interrupted
process's records after its last checkpoint replaced by the resumed run's, none lost, none twice.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace


from lzkernel.cli import main
from lzkernel.runinfo import read_history

from ._util import demo_config, read_metrics, read_tb_scalars, without_wall_time

RESUME_EVENT = "resume"  # lzkernel.runinfo.RESUME_EVENT: the record's "event", a file format


def _crash_after(out: Path, step: int) -> None:
    """Leave ``out`` as a process killed after its checkpoint at ``step`` would: the later
    checkpoints and the summary gone, the records after that checkpoint still logged."""
    for ckpt in (out / "ckpt").glob("step_*"):
        if int(ckpt.name.split("_")[1]) > step:
            shutil.rmtree(ckpt)
    (out / "summary.json").unlink()


def test_a_resume_after_a_crash_leaves_one_history_in_jsonl_and_tensorboard(demo_path: SimpleNamespace,
                                                                            tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    cfg = demo_config(tmp_path / "demo.yaml", straight, run={"keep_last": 5})
    assert main(["run", str(cfg)]) == 0
    out = tmp_path / "out"
    shutil.copytree(straight, out)
    _crash_after(out, 10)
    assert main(["run", str(cfg), f"run.out_dir={out}", "--resume", "auto"]) == 0

    records = read_metrics(out, resumes=True)
    markers = [i for i, r in enumerate(records) if r["event"] == RESUME_EVENT]
    assert len(markers) == 1 and markers[0] == len(read_metrics(straight))  # after the old tail, before the new
    marker = records[markers[0]]
    meta = json.loads((out / "ckpt" / "step_000000000010" / "meta.json").read_text())
    assert marker == {"event": RESUME_EVENT, "checkpoint": str(out / "ckpt" / "step_000000000010"),
                      "train_iter": 10, "env_steps": 100, "wall_time": meta["wall_time"]}
    assert without_wall_time(read_history(out).records) == without_wall_time(read_metrics(straight))

    # TensorBoard: the events written after step 10's checkpoint are cut from the old file, so every
    # tag holds the straight run's points once, in order (the old code kept iterations 11-20 twice).
    assert read_tb_scalars(out / "tb") == read_tb_scalars(straight / "tb")
    assert len(list((out / "tb").glob("events.out.tfevents.*"))) == 2


def test_a_resume_with_nothing_to_do_writes_no_record_and_leaves_tensorboard_alone(demo_path: SimpleNamespace,
                                                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"keep_last": 5})
    assert main(["run", str(cfg)]) == 0
    _crash_after(out, 15)  # records of 16-20 logged after the checkpoint kept
    metrics = (out / "metrics.jsonl").read_bytes()
    tb = {p.name: p.read_bytes() for p in (out / "tb").iterdir()}
    assert main(["run", str(cfg), "run.max_train_iters=15", f"run.out_dir={out}", "--resume", "auto"]) == 0
    assert (out / "metrics.jsonl").read_bytes() == metrics
    assert {p.name: p.read_bytes() for p in (out / "tb").iterdir()} == tb


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_read_history_drops_what_followed_the_checkpoint_and_keeps_what_preceded_it(tmp_path: Path) -> None:
    """The loop's order: train 100 is logged, checkpoint 100 saved, then eval 100 and collect 100;
    the process dies in the same iteration (nothing at 101 or later). Resumed, it logs eval 100
    and collect 100 again. The old rule (a train_iter going back) saw no rewind and kept both
    twice; and where it did see one (a crash at 125), it dropped train 100, logged once, before
    the checkpoint."""
    def rec(event: str, it: int, wall: float) -> dict:
        return {"event": event, "train_iter": it, "env_steps": 6 * it, "wall_time": wall, f"{event}/x": it}

    before = [rec("collect", 75, 1.0), rec("train", 100, 2.0)]
    after = [rec("eval", 100, 2.5), rec("collect", 100, 2.6)]
    resume = {"event": RESUME_EVENT, "checkpoint": "ckpt/step_000000000100", "train_iter": 100,
              "env_steps": 600, "wall_time": 2.1}
    replay = [rec("eval", 100, 2.4), rec("collect", 100, 2.5), rec("train", 125, 3.0)]
    _write(tmp_path / "metrics.jsonl", before + after + [resume] + replay)
    assert read_history(tmp_path).records == before + replay
    evals = read_history(tmp_path, lambda r: r["event"] == "eval").records
    assert evals == [replay[0]]

    _write(tmp_path / "metrics.jsonl", before + after + [rec("train", 125, 3.0)] + [resume] + replay)
    history = read_history(tmp_path)
    assert history.records == before + replay and history.last == replay[-1]
    assert "train/x" in history.names and RESUME_EVENT not in {r["event"] for r in history.records}


def test_read_history_of_a_run_dir_from_before_resume_records(tmp_path: Path) -> None:
    """No resume record: a train_iter going back still starts a new history (old run dirs)."""
    recs = [{"event": "train", "train_iter": i, "wall_time": float(i)} for i in (5, 10, 15)]
    recs += [{"event": "train", "train_iter": i, "wall_time": float(i) + 0.5} for i in (15,)]
    recs += [{"event": "train", "train_iter": i, "wall_time": float(i) + 0.5} for i in (11, 12)]
    _write(tmp_path / "metrics.jsonl", recs)
    assert [r["train_iter"] for r in read_history(tmp_path).records] == [5, 10, 11, 12]


def test_read_history_keeps_the_history_before_a_resume_from_a_checkpoint_without_wall_time(tmp_path: Path) -> None:
    """A checkpoint written before meta held wall_time restarts the clock at 0 when resumed (its
    resume record has no wall_time). A later resume record's wall_time is on the new clock: it
    must not cut the records of the old clock, whose wall_time is larger, which the resumed run
    continues from (only what followed its own checkpoint goes)."""
    def rec(it: int, wall: float) -> dict:
        return {"event": "eval", "train_iter": it, "wall_time": wall, "eval/return_mean": float(it)}

    old = [rec(it, 10.0 * it) for it in range(0, 121, 10)]  # clock up to 1200 s; checkpoint at 100
    resume_old = {"event": RESUME_EVENT, "checkpoint": "ckpt/step_000000000100", "train_iter": 100}
    new = [rec(it, float(it - 100)) for it in range(110, 211, 10)]  # clock from 0; checkpoint at 200
    resume_new = {"event": RESUME_EVENT, "checkpoint": "ckpt/step_000000000200", "train_iter": 200,
                  "wall_time": 100.0}
    _write(tmp_path / "metrics.jsonl", old + [resume_old] + new + [resume_new])
    assert [r["train_iter"] for r in read_history(tmp_path).records] == list(range(0, 201, 10))

    # a rewind to a checkpoint of the new clock cuts that clock's later records, by wall_time
    resume_back = {"event": RESUME_EVENT, "checkpoint": "ckpt/step_000000000150", "train_iter": 150,
                   "wall_time": 50.0}
    _write(tmp_path / "metrics.jsonl", old + [resume_old] + new + [resume_back])
    assert [r["train_iter"] for r in read_history(tmp_path).records] == list(range(0, 151, 10))
