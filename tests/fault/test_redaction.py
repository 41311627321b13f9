"""RELIABILITY E7: a config key that looks like a credential is redacted in everything a run
writes or prints (config.yaml of the run and of its checkpoints, overrides.txt, command.txt, the
resume hint, ``lzkernel config``), while the component gets the real value, and a resume or a
``config --diff`` against the written config sees no difference."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_helpers import CARTPOLE_REZERO, fault_env, loop_config, lzk
from lzkernel.config.redact import REDACTED, is_secret, redact_argv, redact_tree

SECRET = "hunter2-0123456789abcdef"


@pytest.mark.parametrize("key", ["api_key", "apikey", "wandb_api_key", "sink.hf_token", "token", "password",
                                 "db_passwd", "client_secret", "aws_secret_access_key", "private_key", "credentials",
                                 "auth", "API_KEY", "apiToken", "hfToken", "accessToken", "secretKey", "Authorization",
                                 "pwd", "passphrase", "api_tokens", "client_secrets", "wandb.key"])
def test_keys_that_look_like_credentials(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize("key", ["tokens_per_block", "context_length", "key_dim", "author", "authority", "passes",
                                 "secrets_dir_count", "policy.model.embed_dim", "token_dim", "max_token_len",
                                 "token_budget", "token_file", "credentials_path", "api_key_env", "auth_mode",
                                 "aws_access_key_id", "keyboard"])
def test_keys_that_do_not(key: str) -> None:
    assert not is_secret(key)


def test_redact_tree_and_argv() -> None:
    tree = {"env": {"name": "gymnasium", "kwargs": {"api_key": SECRET, "level": 3}, "token": None},
            "sink": {"hf_token": "", "items": [{"password": SECRET}], "credentials": {"user": "me", "port": 22}},
            "policy": {"max_tokens": 512}}
    assert redact_tree(tree) == {"env": {"name": "gymnasium", "kwargs": {"api_key": REDACTED, "level": 3}, "token": None},
                                 "sink": {"hf_token": "", "items": [{"password": REDACTED}],
                                          "credentials": {"user": REDACTED, "port": 22}},
                                 "policy": {"max_tokens": 512}}  # only text is secret
    assert tree["env"]["kwargs"]["api_key"] == SECRET  # a copy: the original is untouched
    assert redact_argv(["run", "c.yaml", f"trainer.api_token={SECRET}", f"+env.kwargs.api_key={SECRET}",
                        "policy.lr=3", "--resume", "auto", "~sink.token"]) == [
        "run", "c.yaml", f"trainer.api_token={REDACTED}", f"+env.kwargs.api_key={REDACTED}", "policy.lr=3",
        "--resume", "auto", "~sink.token"]
    assert redact_argv([f"trainer={{name: fault_loop, api_token: {SECRET}}}", f"+env.kwargs.credentials.key={SECRET}"]) \
        == [f"trainer={{name: fault_loop, api_token: {REDACTED}}}", f"+env.kwargs.credentials.key={REDACTED}"]


def test_errors_and_logs_do_not_print_a_remembered_secret(tmp_path: Path) -> None:
    """A bad value of a secret key, and an env that rejects a secret keyword: the one error line
    and summary.json name the key, not the value."""
    cfg = loop_config(tmp_path / "c.yaml", tmp_path / "out")
    proc = lzk(["config", cfg, "trainer.api_token=12345678", "-p", "lzk_fault_plugin"], tmp_path, fault_env())
    assert proc.returncode == 2 and "trainer.api_token" in proc.stderr and "12345678" not in proc.stderr, proc.stderr
    proc = lzk(["config", cfg, f"trainer.api_token=[{SECRET}", "-p", "lzk_fault_plugin"], tmp_path, fault_env())
    assert proc.returncode == 2 and SECRET not in proc.stderr, proc.stderr
    out = tmp_path / "cp"
    proc = lzk(["run", CARTPOLE_REZERO, f"run.out_dir={out}", f"+env.kwargs.api_key={SECRET}", "run.progress=false"],
               tmp_path, fault_env())
    assert proc.returncode == 2 and "rejected kwargs" in proc.stderr and SECRET not in proc.stderr, proc.stderr[-2000:]
    if (out / "summary.json").is_file():
        assert SECRET not in (out / "summary.json").read_text()


def test_a_run_writes_no_secret_and_resumes_with_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = loop_config(tmp_path / "c.yaml", out, run={"max_train_iters": 4, "checkpoint_every": 2})
    args = ["run", cfg, f"trainer.api_token={SECRET}", "-p", "lzk_fault_plugin"]
    proc = lzk(args, tmp_path, fault_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = json.loads((out / "resolved.json").read_text())
    assert notes["fault_loop.api_token_length"] == len(SECRET)  # the trainer got the real value
    written = [p for p in out.rglob("*") if p.is_file()]
    assert len([p for p in written if p.name == "config.yaml"]) >= 2  # the run's and its checkpoints'
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert f"api_token: {REDACTED}" in (out / "config.yaml").read_text()
    assert f"trainer.api_token={REDACTED}" in (out / "overrides.txt").read_text()
    assert f"trainer.api_token={REDACTED}" in (out / "command.txt").read_text()
    assert SECRET not in proc.stdout + proc.stderr
    # The same command resumes: the written (redacted) config is no difference.
    more = lzk([*args, "run.max_train_iters=6", "--resume", "auto"], tmp_path, fault_env())
    assert more.returncode == 0, more.stderr[-3000:]
    assert SECRET not in more.stdout + more.stderr
    # config: the resolved config shown is redacted; a diff against the run sees no difference.
    shown = lzk(["config", cfg, f"trainer.api_token={SECRET}", "-p", "lzk_fault_plugin"], tmp_path, fault_env())
    assert shown.returncode == 0 and SECRET not in shown.stdout and f"api_token: {REDACTED}" in shown.stdout
    diff = lzk(["config", cfg, f"trainer.api_token={SECRET}", "run.max_train_iters=6", "--diff", out,
                "-p", "lzk_fault_plugin"], tmp_path, fault_env())
    assert diff.returncode == 0 and diff.stdout.strip() == "no differences", diff.stdout + diff.stderr
    # The run's written config cannot start a run: its secret reads <redacted>.
    again = lzk(["run", out / "config.yaml", f"run.out_dir={tmp_path / 'again'}", "-p", "lzk_fault_plugin"], tmp_path,
                fault_env())
    assert again.returncode == 2 and "trainer.api_token: the config" in again.stderr and "holds '<redacted>'" in \
        again.stderr, again.stderr


def test_the_resume_hint_redacts_the_secret() -> None:
    import argparse

    from lzkernel.cli import _resume_command

    args = argparse.Namespace(config="c.yaml", overrides=[f"trainer.api_token={SECRET}", "run.seed=3"], plugins=["x"],
                              disable_plugin_autoload=False)
    assert _resume_command(args, 1) == (f"lzkernel run c.yaml 'trainer.api_token={REDACTED}' run.seed=3 -p x "
                                        "--resume auto  (with the <redacted> values given again)")
