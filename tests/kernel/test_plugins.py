"""Plugin discovery, blocking, load errors and registry conflicts (RELIABILITY.md S3, B6-B8, E3)."""
from __future__ import annotations

import importlib.metadata as metadata
import json
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from lzkernel import Component, PluginError, hookimpl
from lzkernel.cli import main
from lzkernel.errors import ConfigError
from lzkernel.pluginmanager import Kernel

from ._util import assert_config_error, assert_no_traceback, clean_env, demo_config, lzk

# ---------------------------------------------------------------------------------------------
# The separate distribution lzkernel-demo, found through its entry point
# ---------------------------------------------------------------------------------------------


def test_plugins_json_lists_the_demo_distribution(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    proc = lzk(["plugins", "--json"], clean_env(plugin_site.demo), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    demo = {e["name"]: e for e in data["plugins"]}["demo"]
    assert demo["dist"] == "lzkernel-demo"
    assert demo["version"] == "0.3.1"
    assert demo["module"] == "lzkernel_demo.plugin"
    assert demo["source"] == "entry point"
    assert demo["components"] == {"trainer": ["demo_counter"]}
    assert demo["hooks"] == ["lzkernel_register_trainers"]
    assert Path(demo["file"]).is_relative_to(plugin_site.demo)  # the installed copy, not the source tree
    assert data["errors"] == [] and data["blocked"] == [] and data["autoload"] is True
    # the kernel's own plugins come from the lzkernel distribution
    own = {e["name"]: e for e in data["plugins"] if e["dist"] == "lzkernel"}
    assert {"comm", "jsonl", "tensorboard", "progress"} <= set(own)


def test_plugins_json_without_the_demo_distribution(tmp_path: Path) -> None:
    """The control: without the fixture on PYTHONPATH nothing named demo exists."""
    proc = lzk(["plugins", "--json"], clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "demo" not in {e["name"] for e in json.loads(proc.stdout)["plugins"]}


def test_demo_is_real_distribution_metadata(demo_path: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    eps = {ep.name: ep for ep in metadata.entry_points(group="lzkernel")}
    assert eps["demo"].value == "lzkernel_demo.plugin"
    assert eps["demo"].dist.metadata["Name"] == "lzkernel-demo" and eps["demo"].dist.version == "0.3.1"
    kernel = Kernel()
    assert kernel.errors == []
    info = kernel.infos["demo"]
    assert (info.dist, info.version, info.source) == ("lzkernel-demo", "0.3.1", "entry point")
    component = kernel.registry.get("trainer", "demo_counter")
    assert component.plugin == "demo" and component.config.__name__ == "CounterConfig"
    assert "lzkernel_demo.plugin" in sys.modules
    assert main(["plugins"]) == 0
    assert "demo  (lzkernel-demo 0.3.1; lzkernel_demo.plugin)\n    trainer: demo_counter" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["-p no:demo", "env LZKERNEL_DISABLE_PLUGIN_AUTOLOAD=1", "autoload=False"])
def test_blocked_demo_is_never_imported(demo_path: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    assert "demo" in {ep.name for ep in metadata.entry_points(group="lzkernel")}  # visible ...
    assert not any(m.startswith("lzkernel_demo") for m in sys.modules)
    if how == "-p no:demo":
        kernel = Kernel(["no:demo"])
        assert kernel.blocked == {"demo"} and "comm" in kernel.infos  # only demo is skipped
    elif how.startswith("env"):
        monkeypatch.setenv("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "1")
        kernel = Kernel()
        assert kernel.autoload is False and kernel.infos == {}
    else:
        kernel = Kernel(autoload=False)
        assert kernel.infos == {}
    assert "demo" not in kernel.infos
    assert "demo_counter" not in kernel.registry.names("trainer")
    assert not any(m.startswith("lzkernel_demo") for m in sys.modules)  # ... but never imported


def test_a_block_that_names_nothing_is_a_config_error(demo_path: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`-p no:typo` used to be accepted silently, leaving the plugin meant loaded; a block may
    name an entry point, its module or a package above it, or its distribution."""
    with pytest.raises(ConfigError, match=r"-p no:demoo: no plugin, module or distribution of that name"):
        Kernel(["no:demoo"]).raise_on_errors()
    for name in ("demo", "lzkernel_demo", "lzkernel_demo.plugin", "lzkernel-demo", "LZKERNEL_DEMO"):
        Kernel([f"no:{name}"]).raise_on_errors()  # each names the demo plugin
    assert main(["plugins", "-p", "no:demoo"]) == 2  # the listing lists it as an error (exit 2)
    assert "ERROR -p no:demoo: no plugin, module or distribution of that name" in capsys.readouterr().out
    monkeypatch.setenv("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert main(["plugins"]) == 0
    assert "no plugins loaded: autoload is off" in capsys.readouterr().out


def test_explicit_p_loads_a_plugin_with_autoload_off(demo_path: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", "1")
    kernel = Kernel(["demo"])
    assert set(kernel.infos) == {"demo"} and kernel.infos["demo"].dist == "lzkernel-demo"
    assert kernel.registry.names("trainer") == ["demo_counter"]
    monkeypatch.setenv("LZKERNEL_PLUGINS", "demo,comm")
    assert set(Kernel().infos) == {"demo", "comm"}
    # a block wins over an explicit request
    assert "demo" not in Kernel(["no:demo", "demo"]).infos


def test_blocked_in_a_fresh_process(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    """In a subprocess: `plugins -p no:demo` and the env switch leave lzkernel_demo out of sys.modules,
    while the unblocked command imports it (so the check can fail)."""
    script = ("import json, sys; from lzkernel.cli import main; rc = main(sys.argv[1:]); "
              "print(json.dumps({'rc': rc, 'imported': 'lzkernel_demo' in sys.modules}))")
    results = {}
    for label, args, extra in [("plain", ["plugins", "--json"], {}),
                               ("p-no", ["plugins", "--json", "-p", "no:demo"], {}),
                               ("env", ["plugins", "--json"], {"LZKERNEL_DISABLE_PLUGIN_AUTOLOAD": "1"})]:
        proc = subprocess.run([sys.executable, "-c", script, *args], env=clean_env(plugin_site.demo, **extra),
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        *body, last = proc.stdout.strip().splitlines()
        listing = json.loads("\n".join(body))
        results[label] = (json.loads(last)["imported"], "demo" in {e["name"] for e in listing["plugins"]})
    assert results == {"plain": (True, True), "p-no": (False, False), "env": (False, False)}


def test_run_with_demo_blocked_names_the_unknown_trainer(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out")
    proc = lzk(["run", cfg, "-p", "no:demo"], clean_env(plugin_site.demo), cwd=tmp_path)
    assert_config_error(proc, "unknown trainer 'demo_counter'")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# A plugin that raises on import: lzkernel-broken 9.9.9
# ---------------------------------------------------------------------------------------------


def test_broken_plugin_is_named_with_dist_and_version(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    env = clean_env(plugin_site.demo, plugin_site.broken)
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out", run={"max_train_iters": 2})
    for command in (["run", cfg], ["config", cfg]):
        proc = lzk(command, env, cwd=tmp_path)
        assert_config_error(proc, "plugin 'broken'", "distribution lzkernel-broken 9.9.9",
                            "RuntimeError: the broken plugin fails on purpose", "-p no:broken")
    assert not (tmp_path / "out").exists()
    # `plugins` still lists every plugin and reports the error, with exit code 2
    proc = lzk(["plugins", "--json"], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    data = json.loads(proc.stdout)
    assert [(e["name"], e["dist"], e["version"]) for e in data["errors"]] == [("broken", "lzkernel-broken", "9.9.9")]
    assert "demo" in {e["name"] for e in data["plugins"]}


def test_blocking_the_broken_plugin_lets_the_run_start(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    env = clean_env(plugin_site.demo, plugin_site.broken)
    out = tmp_path / "out"
    cfg = demo_config(tmp_path / "demo.yaml", out, run={"max_train_iters": 2, "checkpoint_every": 0})
    proc = lzk(["run", cfg, "-p", "no:broken"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    versions = json.loads((out / "versions.json").read_text())
    assert "broken" not in versions["plugins"] and versions["plugins"]["demo"]["version"] == "0.3.1"
    assert [r["train_iter"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if r["event"] == "collect"] == [1, 2]


def test_broken_plugin_in_process(plugin_path: SimpleNamespace, plugin_site: SimpleNamespace) -> None:
    plugin_path.add(plugin_site.broken)
    kernel = Kernel()
    assert [(e.name, e.dist, e.version) for e in kernel.errors] == [("broken", "lzkernel-broken", "9.9.9")]
    assert "RuntimeError" in kernel.errors[0].message and "Traceback" in kernel.errors[0].traceback
    with pytest.raises(Exception, match="distribution lzkernel-broken 9.9.9") as info:
        kernel.raise_on_errors()
    assert type(info.value).__name__ == "ConfigError"
    blocked = Kernel(["no:broken"])
    assert blocked.errors == [] and "lzkernel_broken.plugin" not in sys.modules


# ---------------------------------------------------------------------------------------------
# Registration rules, checked with small in-process plugins
# ---------------------------------------------------------------------------------------------


def _module(name: str, **hooks: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, fn in hooks.items():
        setattr(mod, key, fn)
    return mod


def _trainer_plugin(module_name: str, *names: str) -> types.ModuleType:
    @hookimpl
    def lzkernel_register_trainers() -> list[Component]:
        return [Component(n, factory=lambda cfg, run: None, doc=f"{n} from {module_name}") for n in names]

    return _module(module_name, lzkernel_register_trainers=lzkernel_register_trainers)


def test_in_process_plugins_register_components() -> None:
    kernel = Kernel(plugins=[_trainer_plugin("plug_a", "alpha"), _trainer_plugin("plug_b", "beta")], autoload=False)
    assert kernel.registry.names("trainer") == ["alpha", "beta"]
    assert kernel.registry.get("trainer", "beta").plugin == "plug_b"
    assert kernel.registry.by_plugin() == {"plug_a": {"trainer": ["alpha"]}, "plug_b": {"trainer": ["beta"]}}
    assert {e["name"]: e["source"] for e in kernel.describe()} == {"plug_a": "object", "plug_b": "object"}


def test_a_name_registered_twice_names_both_plugins() -> None:
    kernel = Kernel(plugins=[_trainer_plugin("plug_a", "same", "only_a"), _trainer_plugin("plug_b", "same")],
                    autoload=False)
    with pytest.raises(PluginError) as info:
        kernel.registry  # noqa: B018 - collected lazily
    msg = str(info.value)
    assert "trainer 'same' is registered twice" in msg
    assert "plugin 'plug_a'" in msg and "plugin 'plug_b'" in msg
    assert "block one of them with -p no:plug_a or -p no:plug_b" in msg


def test_same_name_in_two_roles_is_fine() -> None:
    @hookimpl
    def lzkernel_register_envs() -> list[Component]:
        return [Component("same", factory=lambda cfg, run: None)]

    kernel = Kernel(plugins=[_trainer_plugin("plug_a", "same"), _module("plug_e", lzkernel_register_envs=lzkernel_register_envs)],
                    autoload=False)
    assert kernel.registry.names("trainer") == ["same"] and kernel.registry.names("env") == ["same"]


def test_unknown_hook_is_a_load_error() -> None:
    """Recorded like an import failure (the plugin is not registered); run/config refuse it."""
    @hookimpl
    def lzkernel_no_such_hook() -> None:
        pass

    kernel = Kernel(plugins=[_module("plug_x", lzkernel_no_such_hook=lzkernel_no_such_hook)], autoload=False)
    assert "plug_x" not in kernel.infos and kernel.pm.get_plugin("plug_x") is None
    with pytest.raises(ConfigError, match=r"plugin 'plug_x' .*has a wrong hook implementation: "
                                          r"lzkernel_no_such_hook is not an lzkernel hook"):
        kernel.raise_on_errors()


def test_hookimpl_with_a_wrong_signature_is_a_load_error() -> None:
    @hookimpl
    def lzkernel_after_eval(run, metrics, extra):  # noqa: ANN001, ANN202 - 'extra' is not in the spec
        pass

    kernel = Kernel(plugins=[_module("plug_sig", lzkernel_after_eval=lzkernel_after_eval)], autoload=False)
    with pytest.raises(ConfigError, match=r"plugin .plug_sig. .*has a wrong hook implementation: "
                                          r"lzkernel_after_eval\(run, metrics, extra\) takes 'extra'"):
        kernel.raise_on_errors()


@pytest.mark.parametrize(("result", "needle"), [
    ("not a list", "must return a list of Components, got str"),
    (["not a component"], "expected lzkernel.Component"),
])
def test_bad_registration_results_name_the_plugin(result: object, needle: str) -> None:
    @hookimpl
    def lzkernel_register_trainers() -> object:
        return result

    kernel = Kernel(plugins=[_module("plug_bad", lzkernel_register_trainers=lzkernel_register_trainers)], autoload=False)
    with pytest.raises(PluginError, match="plug_bad") as info:
        kernel.registry  # noqa: B018
    assert needle in str(info.value)


def test_registration_hook_that_raises_names_the_plugin() -> None:
    @hookimpl
    def lzkernel_register_trainers() -> list[Component]:
        raise ValueError("boom")

    kernel = Kernel(plugins=[_module("plug_boom", lzkernel_register_trainers=lzkernel_register_trainers)], autoload=False)
    with pytest.raises(PluginError, match=r"plugin 'plug_boom' failed in lzkernel_register_trainers: ValueError\('boom'\)"):
        kernel.registry  # noqa: B018
