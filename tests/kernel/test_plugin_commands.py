"""Plugin subcommands (hook ``lzkernel_add_commands``): a plugin's command runs with its own
arguments and exit code and is listed by ``--help``; a name clash or a command without a function
is one error naming the plugin (exit 2); built-in commands load no plugin for this."""
from __future__ import annotations

from pathlib import Path

from ._util import assert_config_error, clean_env, lzk

HELLO = '''
from pathlib import Path
from lzkernel import hookimpl

Path(__file__).with_suffix(".imported").write_text("yes")  # a sentinel: this module was loaded


def _hello(args):
    print(f"hello {args.name}")
    return 3


@hookimpl
def lzkernel_add_commands(subparsers):
    p = subparsers.add_parser("hello", help="say hello from a plugin")
    p.add_argument("--name", default="world")
    p.set_defaults(lzkernel_command=_hello)
'''


def _plugin(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    (tmp_path / f"{name}.py").write_text(body, encoding="utf-8")
    return clean_env(tmp_path, LZKERNEL_PLUGINS=name)


def test_a_plugin_command_runs_and_is_listed(tmp_path: Path) -> None:
    env = _plugin(tmp_path, "hello_cmd", HELLO)
    proc = lzk(["hello", "--name", "lzk"], env, tmp_path)
    assert (proc.returncode, proc.stdout) == (3, "hello lzk\n"), proc.stderr
    help_text = lzk(["--help"], env, tmp_path).stdout
    assert "hello" in help_text and "say hello from a plugin" in help_text
    # -p after the command loads a plugin too (every plugin command takes the plugin options)
    proc = lzk(["hello", "-p", "hello_cmd"], clean_env(tmp_path), tmp_path)
    assert (proc.returncode, proc.stdout) == (3, "hello world\n"), proc.stderr


def test_built_in_commands_load_no_plugin_for_commands(tmp_path: Path) -> None:
    env = _plugin(tmp_path, "hello_cmd", HELLO)
    proc = lzk(["status", tmp_path / "nowhere"], env, tmp_path)  # `status` imports no plugin at all
    assert proc.returncode == 2 and "no such run directory" in proc.stderr
    assert not (tmp_path / "hello_cmd.imported").exists()


def test_a_clash_or_a_command_without_function_names_the_plugin(tmp_path: Path) -> None:
    env = _plugin(tmp_path, "clash_cmd", "from lzkernel import hookimpl\n\n@hookimpl\n"
                                         "def lzkernel_add_commands(subparsers):\n"
                                         "    subparsers.add_parser('run').set_defaults(lzkernel_command=print)\n")
    assert_config_error(lzk(["mine"], env, tmp_path), "plugin clash_cmd", "conflicting subparser: run")
    env = _plugin(tmp_path, "bare_cmd", "from lzkernel import hookimpl\n\n@hookimpl\n"
                                        "def lzkernel_add_commands(subparsers):\n    subparsers.add_parser('bare')\n")
    assert_config_error(lzk(["bare"], env, tmp_path), "plugin bare_cmd: command 'bare' has no function to run")


def test_the_documented_export_command_works(tmp_path: Path) -> None:
    """docs/writing-plugins.md's command example, run as written on a real run's checkpoint."""
    import re

    import torch

    from ._util import REPO

    doc = (REPO / "docs" / "writing-plugins.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Commands"):doc.index("## A second example")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    env = _plugin(tmp_path, "export_cmd", code)
    out = tmp_path / "run"
    run = lzk(["run", REPO / "configs" / "cartpole_rezero_fast.yaml", "run.max_train_iters=2", f"run.out_dir={out}",
               "run.progress=false", "evaluator.every_train_iters=100"], clean_env(), tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (ckpt,) = sorted((out / "ckpt").glob("step_*"))
    proc = lzk(["export", ckpt, tmp_path / "policy.pt"], env, tmp_path)
    assert proc.returncode == 0 and "wrote" in proc.stdout and "train_iter 2" in proc.stdout, proc.stderr
    weights = torch.load(tmp_path / "policy.pt", weights_only=True)
    assert isinstance(weights, dict) and weights  # the policy's state, loadable without trusting pickles
