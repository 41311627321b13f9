"""The mistakes a third-party plugin author makes, each named in one line before anything runs
(docs/writing-plugins.md, "When something is wrong"): hooks misspelt, undecorated or taking an
argument the hook does not pass; components whose config is not a schema or whose factory
cannot be called as the role table calls it; an object that does not implement its role's
Protocol; and the listings (`lzkernel plugins`, `config --explain`) that must keep working."""
from __future__ import annotations

import dataclasses
import sys
import textwrap
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from lzkernel import Component, PluginError, hookimpl
from lzkernel.cli import main
from lzkernel.errors import ConfigError
from lzkernel.pluginmanager import Kernel

from ._util import assert_config_error, clean_env, lzk


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """``write(name, source)``: a module importable with ``-p name`` in this process."""
    monkeypatch.delenv("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("LZKERNEL_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


# ---------------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------------


def test_a_misspelt_hook_names_the_closest_and_the_other_plugins_still_load() -> None:
    @hookimpl
    def lzkernel_after_evaluation(run, metrics):  # noqa: ANN001, ANN202
        pass

    @hookimpl
    def lzkernel_after_eval(run, metrics):  # noqa: ANN001, ANN202
        pass

    kernel = Kernel(plugins=[_module("typo", lzkernel_after_evaluation=lzkernel_after_evaluation),
                             _module("fine", lzkernel_after_eval=lzkernel_after_eval)], autoload=False)
    assert list(kernel.infos) == ["fine"]
    (error,) = kernel.errors
    assert error.describe() == ("plugin 'typo' (no distribution) has a wrong hook implementation: "
                                "lzkernel_after_evaluation is not an lzkernel hook (did you mean 'lzkernel_after_eval'?)")


def test_a_hook_function_without_hookimpl_is_an_error_not_silence() -> None:
    def lzkernel_after_train(run, metrics):  # noqa: ANN001, ANN202 - @hookimpl forgotten
        pass

    kernel = Kernel(plugins=[_module("unmarked", lzkernel_after_train=lzkernel_after_train)], autoload=False)
    with pytest.raises(ConfigError, match=r"plugin 'unmarked' .*lzkernel_after_train is not decorated with "
                                          r"@lzkernel.hookimpl, so it would never be called"):
        kernel.raise_on_errors()


def test_a_hook_argument_the_hook_does_not_pass_is_one_line_naming_what_it_passes() -> None:
    @hookimpl
    def lzkernel_after_eval(run, results):  # noqa: ANN001, ANN202 - the hook passes 'metrics'
        pass

    kernel = Kernel(plugins=[_module("argname", lzkernel_after_eval=lzkernel_after_eval)], autoload=False)
    (error,) = kernel.errors
    assert "\n" not in error.describe()
    assert error.message == ("lzkernel_after_eval(run, results) takes 'results', which the hook does not pass; "
                             "it passes (run, metrics), and an implementation may take any of them")


def test_a_load_error_names_the_entry_point_target_and_how_to_skip_it(plugin_path: SimpleNamespace,
                                                                      plugin_site: SimpleNamespace) -> None:
    plugin_path.add(plugin_site.broken)
    kernel = Kernel()
    (error,) = kernel.errors
    assert error.describe().startswith("plugin 'broken' (distribution lzkernel-broken 9.9.9) failed to load "
                                       "lzkernel_broken.plugin: RuntimeError")
    with pytest.raises(ConfigError, match=r"\(skip it with -p no:broken, or every entry point with "
                                          r"LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1\)$"):
        kernel.raise_on_errors()


# ---------------------------------------------------------------------------------------------
# Components, checked when registered
# ---------------------------------------------------------------------------------------------


class NotADataclass:  # @dataclass forgotten
    n: int = 3


@dataclasses.dataclass
class UnresolvableTypes:
    n: NoSuchType = 3  # noqa: F821 - a name only a TYPE_CHECKING block imports


@dataclasses.dataclass
class Nested:
    inner: UnresolvableTypes = dataclasses.field(default_factory=lambda: UnresolvableTypes())


def _two(cfg, run):  # noqa: ANN001, ANN202
    return None


class NoRun:  # a factory that forgot ``run``
    def __init__(self, cfg):  # noqa: ANN001
        self.cfg = cfg


@pytest.mark.parametrize(("role", "component", "needles"), [
    ("update_schedule", Component("nodc", factory=_two, config=NotADataclass),
     ["update_schedule 'nodc': config must be a dataclass", "got class NotADataclass"]),
    ("env", Component("types", factory=_two, config=UnresolvableTypes),
     ["env 'types': config UnresolvableTypes: its field types cannot be resolved", "NameError", "NoSuchType"]),
    ("env", Component("nested", factory=_two, config=Nested),
     ["env 'nested': config UnresolvableTypes: its field types cannot be resolved"]),
    ("update_schedule", Component("norun", factory=NoRun),
     ["update_schedule 'norun': factory NoRun(cfg) cannot be called as factory(cfg, run)"]),
    ("policy", Component("noenvspec", factory=_two),
     ["policy 'noenvspec': factory _two(cfg, run) cannot be called as factory(cfg, run, env_spec=...)"]),
    ("trainer", Component("", factory=_two), ["its name must be a non-empty string"]),
])
def test_a_component_mistake_names_plugin_component_and_what_is_expected(role: str, component: Component,
                                                                         needles: list[str]) -> None:
    hook = {"update_schedule": "lzkernel_register_update_schedules", "env": "lzkernel_register_envs",
            "policy": "lzkernel_register_policies", "trainer": "lzkernel_register_trainers"}[role]
    kernel = Kernel(plugins=[_module("author", **{hook: hookimpl(specname=hook)(lambda: [component])})],
                    autoload=False)
    with pytest.raises(PluginError) as info:
        kernel.registry  # noqa: B018 - collected lazily
    message = str(info.value)
    assert message.startswith("plugin 'author': ") and "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_a_component_mistake_in_the_cli_is_exit_2_and_plugins_still_lists(
        plugin_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    """`lzkernel config` refuses it in one line; `lzkernel plugins` lists every plugin and the
    mistake (two plugins claiming one name, too), with each observer's event hooks."""
    plugin_dir("lzkm_dup", """
        from lzkernel import Component, hookimpl

        @hookimpl
        def lzkernel_register_update_schedules():
            return [Component("fixed", factory=lambda cfg, run: None)]

        @hookimpl
        def lzkernel_after_eval(run, metrics):
            pass
        """)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {out_dir: out}\ntrainer: {name: muzero}\n", encoding="utf-8")
    assert main(["config", str(cfg), "-p", "lzkm_dup"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("lzkernel: error: update_schedule 'fixed' is registered twice: by plugin 'schedule' and by plugin "
                   "'lzkm_dup'; block one of them with -p no:schedule or -p no:lzkm_dup")
    assert main(["plugins", "-p", "lzkm_dup"]) == 2  # listed, and the exit code says so
    out = capsys.readouterr().out
    assert "lzkm_dup  (-p; lzkm_dup)\n    hooks: lzkernel_after_eval\n" in out
    assert "schedule  (lzkernel" in out and "    update_schedule: fixed, replay_ratio" in out
    assert "ERROR update_schedule 'fixed' is registered twice" in out


def test_a_missing_plugin_module_says_how_it_is_found_and_where_it_was_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that cannot be found: the error says a plugin module is found on PYTHONPATH, and
    the hint removes it from where it was named (LZKERNEL_PLUGINS, or -p)."""
    from lzkernel.pluginmanager import skip_hint

    monkeypatch.setenv("LZKERNEL_PLUGINS", "lzkm_nowhere_env")
    kernel = Kernel(["lzkm_nowhere_arg"], autoload=False)
    by_name = {e.name: e for e in kernel.errors}
    assert by_name["lzkm_nowhere_env"].source == "LZKERNEL_PLUGINS" and by_name["lzkm_nowhere_arg"].source == "-p"
    assert all("put its directory on PYTHONPATH or install it" in e.message for e in kernel.errors)
    assert skip_hint(kernel.errors) == "drop -p lzkm_nowhere_arg; remove lzkm_nowhere_env from LZKERNEL_PLUGINS"


# ---------------------------------------------------------------------------------------------
# Built objects, checked against their role's Protocol
# ---------------------------------------------------------------------------------------------

_NO_TRAIN = """
    from lzkernel import Component, SearchCaches, hookimpl

    class Trainer:
        def __init__(self, cfg, run):
            pass
        def fit(self):  # the Protocol says train()
            pass

    class Cached(Trainer):
        def train(self):
            pass

    @hookimpl
    def lzkernel_register_trainers():
        return [Component("notrain", factory=Trainer),
                Component("nocaches", factory=Cached, provides=(SearchCaches,))]
    """


@pytest.mark.parametrize(("trainer", "needle"), [
    ("notrain", "trainer 'notrain' (plugin 'lzkm_notrain') built a Trainer, which does not implement Trainer: "
                "it lacks train (Trainer declares train)"),
    ("nocaches", "trainer 'nocaches' (plugin 'lzkm_notrain') built a Cached, which does not implement SearchCaches: "
                 "it lacks clear_caches"),
])
def test_an_object_that_does_not_implement_its_protocol_is_exit_2_at_build(tmp_path: Path, trainer: str,
                                                                            needle: str) -> None:
    (tmp_path / "lzkm_notrain.py").write_text(textwrap.dedent(_NO_TRAIN), encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"run: {{out_dir: {tmp_path / 'out'}, max_train_iters: 1, progress: false}}\n"
                   f"trainer: {{name: {trainer}}}\n", encoding="utf-8")
    proc = lzk(["run", cfg, "-p", "lzkm_notrain"], clean_env(tmp_path), cwd=tmp_path)
    assert_config_error(proc, needle)


_RAISES = """
    from lzkernel import Component, hookimpl

    class Trainer:
        def __init__(self, cfg, run):
            self.run = run
        def train(self):
            self.run.emit_train({"train/loss": 1.0})

    def refuse(cfg, run):
        raise ValueError("boom: the trainer refused to start")

    @hookimpl
    def lzkernel_register_trainers():
        return [Component("boom", factory=refuse), Component("fine", factory=Trainer)]

    @hookimpl
    def lzkernel_after_train(run, metrics):
        if run.train_iter >= 0:
            raise KeyError("wandb_project")
    """


@pytest.mark.parametrize(("trainer", "needle"), [
    ("boom", "ValueError: boom: the trainer refused to start (raised by trainer 'boom' (plugin 'lzkm_raises') while "
             "being built)"),
    ("fine", "KeyError: 'wandb_project' (raised by plugin 'lzkm_raises' in its lzkernel_after_train hook)"),
])
def test_an_error_a_plugin_raises_names_the_plugin_in_the_error_line_and_summary(tmp_path: Path, trainer: str,
                                                                                 needle: str) -> None:
    """An exception from a component's factory or from a plugin's hook is a crash (exit 1, with
    its traceback), and its last line and summary.json name the component and plugin."""
    import json

    (tmp_path / "lzkm_raises.py").write_text(textwrap.dedent(_RAISES), encoding="utf-8")
    # A wrapper around every after_train hook (a profiler, say) is not the one named.
    (tmp_path / "lzkm_wrap.py").write_text("from lzkernel import hookimpl\n\n\n@hookimpl(wrapper=True)\n"
                                           "def lzkernel_after_train(run, metrics):\n    return (yield)\n",
                                           encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"run: {{out_dir: {tmp_path / 'out'}, max_train_iters: 1, progress: false}}\n"
                   f"trainer: {{name: {trainer}}}\n", encoding="utf-8")
    proc = lzk(["run", cfg, "-p", "lzkm_raises", "-p", "lzkm_wrap"], clean_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == f"lzkernel: error: rank 0: {needle}", proc.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["error"] == needle


# ---------------------------------------------------------------------------------------------
# config --explain of a config that does not validate yet
# ---------------------------------------------------------------------------------------------


def test_explain_lists_the_keys_of_a_config_missing_a_required_one(
        plugin_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    plugin_dir("lzkm_required", """
        from dataclasses import dataclass
        from lzkernel import Component, hookimpl, option

        @dataclass
        class Cfg:
            path: str = option(doc="Where the data lives.")
            size: int = option(3, doc="How many.", min=1)

        class T:
            def __init__(self, cfg, run):
                pass
            def train(self):
                pass

        @hookimpl
        def lzkernel_register_trainers():
            return [Component("needs_path", factory=T, config=Cfg)]
        """)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {out_dir: out}\ntrainer: {name: needs_path, size: 0}\n", encoding="utf-8")
    assert main(["config", str(cfg), "--explain", "-p", "lzkm_required"]) == 2
    captured = capsys.readouterr()
    rows = {line.split()[0]: line for line in captured.out.splitlines()}
    assert rows["trainer.path"].split()[1:4] == ["str", "(required)", "Where"]
    assert rows["trainer.size"].split()[1:3] == ["int", "3"]
    assert "trainer.path: missing required key" in captured.err and "trainer.size: must be >= 1" in captured.err
