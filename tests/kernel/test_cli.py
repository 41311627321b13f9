"""The command line: --version, torch-free `config`/`plugins`, and start-up errors (exit 2)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import lzkernel
from lzkernel.cli import main

from ._util import HEAVY_MODULES, REPO, assert_config_error, assert_no_traceback, clean_env, demo_config, lzk


def test_version_prints_version_and_registered_plugins(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    proc = lzk(["--version"], clean_env(plugin_site.demo), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"lzkernel {lzkernel.__version__}" == "lzkernel 0.1.0"
    registered = next(line for line in lines if line.startswith("registered plugins: "))
    assert "lzkernel-demo-0.3.1" in registered and "lzkernel-0.1.0" in registered
    names = next(line for line in lines if line.startswith("plugins: "))[len("plugins: "):].split(", ")
    assert "demo" in names and "jsonl" in names and names == sorted(names)


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: lzkernel" in capsys.readouterr().out


# A fresh interpreter runs lzkernel.cli.main(ARGV) and reports which heavy modules got imported.
_PROBE = """
import json, sys
stage = {}
import lzkernel
stage["import lzkernel"] = {m: m in sys.modules for m in HEAVY}
if ARGV:
    from lzkernel.cli import main
    rc = main(ARGV)
    stage["main"] = {m: m in sys.modules for m in HEAVY}
else:
    rc = 0
print("PROBE " + json.dumps({"rc": rc, "stage": stage}))
"""


def _probe(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    code = _PROBE.replace("HEAVY", repr(HEAVY_MODULES)).replace("ARGV", repr(argv))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


@pytest.mark.parametrize("command", ["import-only", "config", "config-explain", "config-rezero", "config-rezero-explain",
                                     "plugins", "plugins-json", "status"])
def test_config_and_plugins_do_not_import_torch(command: str, plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    cfg = str(demo_config(tmp_path / "demo.yaml", tmp_path / "out"))
    real = str(REPO / "configs" / "cartpole_rezero.yaml")  # the first-party trainer's and policy's schemas
    argv = {"import-only": [], "config": ["config", cfg], "config-explain": ["config", cfg, "--explain"],
            "config-rezero": ["config", real], "config-rezero-explain": ["config", real, "--explain"],
            "plugins": ["plugins"], "plugins-json": ["plugins", "--json"], "status": ["status", str(tmp_path)]}[command]
    if command == "status":  # a run directory as a run leaves it
        (tmp_path / "config.yaml").write_text("run: {max_train_iters: 10}\n")
        (tmp_path / "metrics.jsonl").write_text('{"event": "eval", "train_iter": 3, "eval/return_mean": 1.5}\n')
    result = _probe(argv, clean_env(plugin_site.demo), tmp_path)
    assert result["rc"] == 0
    # A gymnasium env section's check looks its id up in gymnasium's registry (lzk_envs.gym.id_problem).
    allowed = {"gymnasium"} if command.startswith("config-rezero") else set()
    for stage, loaded in result["stage"].items():
        expected = {m: stage == "main" and m in allowed for m in HEAVY_MODULES}
        assert loaded == expected, f"after {stage}: {loaded}"


def test_config_refuses_an_unknown_gymnasium_id_as_run_does(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    """`lzkernel config` checks env.id against gymnasium's registry (no torch, no env made), in
    the same one line that `lzkernel run` gives, before run makes its directory."""
    real = str(REPO / "configs" / "cartpole_rezero.yaml")
    line = ("lzkernel: error: invalid config {}: env.id: cannot make gymnasium env 'CartPol-v1': Environment "
            "`CartPol` doesn't exist. Did you mean: `CartPole`? (from a command-line override)").format(real)
    env = clean_env(plugin_site.demo)
    out = tmp_path / "out"
    for command in ("config", "run"):
        proc = lzk([command, real, "env.id=CartPol-v1", f"run.out_dir={out}"], env, cwd=tmp_path)
        assert assert_config_error(proc) == line, command
    assert not out.exists()
    result = _probe(["config", real, "env.id=CartPol-v1"], env, tmp_path)
    assert result["rc"] == 2 and not result["stage"]["main"]["torch"]
    bad = lzk(["config", real, "env.id=a:b:c"], env, cwd=tmp_path)
    assert_config_error(bad, "env.id: 'a:b:c' is neither a gymnasium env id nor module:Id")
    assert lzk(["config", real, "env.id=CartPole"], env, cwd=tmp_path).returncode == 0  # its highest version, as make


def test_resume_from_a_missing_path_exits_2(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out)
    proc = lzk(["run", cfg, "--resume", tmp_path / "no" / "such" / "step_000000000005"],
               clean_env(plugin_site.demo), cwd=tmp_path)
    assert_config_error(proc, "--resume", "no such checkpoint")
    assert not out.exists()  # never a silent fresh start


def test_resume_from_an_incomplete_checkpoint_exits_2(demo_path: SimpleNamespace, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out)
    fake = tmp_path / "ckpt" / "step_000000000005"
    fake.mkdir(parents=True)
    (fake / "state.pt").write_bytes(b"not a checkpoint")
    assert main(["run", str(cfg), "--resume", str(fake)]) == 2
    err = capsys.readouterr().err
    assert "incomplete (no DONE marker)" in err and err.startswith("lzkernel: error: --resume")
    assert not out.exists()


def test_resume_given_a_run_directory_says_what_to_pass(demo_path: SimpleNamespace, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory or its ckpt/ given to --resume PATH is not "interrupted while being
    written": the error says what it is and what to pass instead."""
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 5})
    assert main(["run", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["run", str(cfg), "run.max_train_iters=6", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a checkpoint directory" in err and "--resume auto" in err and "interrupted" not in err
    assert main(["run", str(cfg), "run.max_train_iters=6", "--resume", str(out / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert "not a checkpoint directory" in err and "step_000000000005" in err and len(err.strip().splitlines()) == 1


def test_an_empty_out_dir_is_a_config_error(demo_path: SimpleNamespace, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`run.out_dir=$OUT` with OUT unset would write the run into the working directory."""
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out")
    assert main(["run", str(cfg), "run.out_dir="]) == 2
    err = capsys.readouterr().err
    assert "run.out_dir" in err and "must not be empty" in err
    assert not (tmp_path / "out").exists()


def test_unknown_option_is_an_argparse_error(tmp_path: Path) -> None:
    proc = lzk(["run"], clean_env(), cwd=tmp_path)
    assert proc.returncode == 2
    assert_no_traceback(proc)
    assert "the following arguments are required: config" in proc.stderr


def test_broken_hook_plugin_in_the_cli_is_exit_2(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    """A -p module implementing a hook that does not exist: exit 2 naming it, not a traceback;
    `lzkernel plugins` lists it as an error beside the plugins that loaded."""
    (tmp_path / "bad_hooks.py").write_text(
        "from lzkernel import hookimpl\n\n@hookimpl\ndef lzkernel_no_such_hook():\n    pass\n")
    env = clean_env(tmp_path, plugin_site.demo)
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out")
    proc = lzk(["config", cfg, "-p", "bad_hooks"], env, cwd=tmp_path)
    assert_config_error(proc, "plugin 'bad_hooks'", "lzkernel_no_such_hook is not an lzkernel hook",
                        "drop -p bad_hooks")
    listed = lzk(["plugins", "-p", "bad_hooks"], env, cwd=tmp_path)
    assert listed.returncode == 2, listed.stderr  # everything listed, and the exit code says a plugin failed
    assert "ERROR plugin 'bad_hooks'" in listed.stdout and "demo  (lzkernel-demo 0.3.1" in listed.stdout


def test_a_closed_pipe_ends_the_listing_quietly(tmp_path: Path) -> None:
    """`lzkernel plugins --json | head`: the reader leaves early; exit 141 without a traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "lzkernel", "plugins", "--json"], env=clean_env(),
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc in (0, 141)  # 0 only if the whole listing fit in the pipe before the close


def test_the_resume_hint_repeats_the_config_overrides_and_plugin_options() -> None:
    from lzkernel.cli import _parse, _parser, _resume_command

    args = _parse(_parser(), ["run", "c.yaml", "a.b=1", "-p", "lzk_fault_plugin", "--disable-plugin-autoload"])
    assert _resume_command(args, 1) == ("lzkernel run c.yaml a.b=1 -p lzk_fault_plugin --disable-plugin-autoload "
                                        "--resume auto")
    assert _resume_command(args, 2).startswith("lzkernel launch --nproc 2 c.yaml a.b=1 -p lzk_fault_plugin")
