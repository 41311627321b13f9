"""Config loading: YAML safety, strict schema, YAML-1.1 traps, overrides, and the bad-input menu
of the CLI (exit code 2, one paragraph, no traceback; RELIABILITY.md B1-B6)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lzkernel import Component, ConfigError, option
from lzkernel.cli import main
from lzkernel.config.loader import apply_overrides, load_config, load_yaml, resolve
from lzkernel.config.schema import validate
from lzkernel.registry import Registry

from ._util import assert_config_error, clean_env, demo_config, lzk

# ---------------------------------------------------------------------------------------------
# Unit level: a registry with one small trainer (no plugins involved)
# ---------------------------------------------------------------------------------------------


@dataclass
class Inner:
    depth: int = option(2, doc="Depth.", min=1)


@dataclass
class ToyConfig:
    lr: float = option(0.1, doc="Learning rate.", min=0.0, min_exclusive=True)
    steps_per_iter: int = option(10, doc="Steps.", min=1)
    discount: float = option(0.99, doc="Discount.", min=0.0, max=1.0)
    use_cuda: bool = option(False, doc="A bool.")
    version: str = option("3.10", doc="A string.")
    mode: str = option("a", doc="A choice.", choices=("a", "b"))
    inner: Inner = option(default_factory=Inner, doc="Nested.")
    sizes: list[int] = option(default_factory=lambda: [1, 2], doc="A list.")


def _toy(cfg, run):  # noqa: ANN001, ANN202
    return cfg


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.add("trainer", Component("toy", _toy, ToyConfig, "toy"), "toyplugin")
    reg.add("comm", Component("local", _toy, None, "comm"), "toyplugin")
    return reg


def _resolve(registry: Registry, trainer: dict, run: dict | None = None, **extra: object):
    tree = {"run": run or {}, "trainer": {"name": "toy", **trainer}, **extra}
    return resolve(tree, registry, "cfg.yaml")


def test_valid_config_resolves_with_defaults(registry: Registry) -> None:
    cfg = _resolve(registry, {"lr": 0.5}, {"seed": 3})
    opts = cfg.section("trainer")
    assert isinstance(opts, ToyConfig) and opts.lr == 0.5 and opts.steps_per_iter == 10
    assert cfg.run.seed == 3 and cfg.name("trainer") == "toy"
    assert cfg.name("comm") == "local"  # the default comm section
    assert yaml.safe_load(cfg.to_yaml())["trainer"] == {
        "name": "toy", "lr": 0.5, "steps_per_iter": 10, "discount": 0.99, "use_cuda": False,
        "version": "3.10", "mode": "a", "inner": {"depth": 2}, "sizes": [1, 2]}


def test_yaml_11_float_in_exponent_form_is_a_float(registry: Registry, tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text("trainer: {name: toy, lr: 3e-4, discount: 1e-1}\n")
    raw = load_yaml(p)
    assert raw["trainer"]["lr"] == "3e-4"  # what PyYAML (YAML 1.1) gives: a string ...
    cfg = load_config(p, [], registry)
    lr = cfg.section("trainer").lr
    assert type(lr) is float and lr == pytest.approx(3e-4)  # ... converted explicitly to a float
    assert type(cfg.section("trainer").discount) is float


@pytest.mark.parametrize(
    ("trainer", "needle"),
    [
        ({"steps_per_iter": True}, "trainer.steps_per_iter: expected an integer, got boolean True"),  # `yes`
        ({"steps_per_iter": "ten"}, "trainer.steps_per_iter: expected an integer, got str 'ten'"),
        ({"steps_per_iter": "2.5"}, "trainer.steps_per_iter: expected an integer, got str '2.5'"),
        ({"steps_per_iter": 2.5}, "trainer.steps_per_iter: expected an integer, got float 2.5"),
        ({"use_cuda": "no"}, "trainer.use_cuda: expected true or false, got 'no'"),
        ({"use_cuda": 0}, "trainer.use_cuda: expected true or false, got 0"),
        ({"version": 3.1}, "trainer.version: expected a string, got float 3.1"),  # `version: 3.10`
        ({"lr": True}, "trainer.lr: expected a number, got boolean True"),
        ({"lr": "fast"}, "trainer.lr: expected a number, got str 'fast'"),
        ({"lr": "nan"}, "trainer.lr: expected a number"),
        ({"lr": float("nan")}, "trainer.lr: must be > 0.0"),
        ({"lr": 0}, "trainer.lr: must be > 0.0, got 0.0"),
        ({"discount": 1.5}, "trainer.discount: must be <= 1.0, got 1.5"),
        ({"mode": "c"}, "trainer.mode: expected one of ['a', 'b'], got 'c'"),
        ({"inner": {"depth": 0}}, "trainer.inner.depth: must be >= 1, got 0"),
        ({"inner": {"dept": 3}}, "trainer.inner.dept: unknown key (did you mean 'depth'?)"),
        ({"inner": 3}, "trainer.inner: expected a mapping"),
        ({"sizes": [1, "x"]}, "trainer.sizes[1]: expected an integer"),
        ({"learing_rate": 0.1}, "trainer.learing_rate: unknown key"),
        ({"stepsperiter": 1}, "trainer.stepsperiter: unknown key (did you mean 'steps_per_iter'?)"),
    ],
)
def test_schema_rejects_bad_values_with_the_key_path(registry: Registry, trainer: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(registry, trainer)
    assert needle in str(info.value)
    assert len(info.value.problems) == 1, info.value.problems


def test_schema_conversions_are_explicit(registry: Registry) -> None:
    opts = _resolve(registry, {"steps_per_iter": 1e5, "lr": 1, "use_cuda": True}).section("trainer")
    assert opts.steps_per_iter == 100000 and type(opts.steps_per_iter) is int
    # PyYAML reads `1e5` as the string '1e5'; an int field converts it (documented) ...
    converted = _resolve(registry, {"steps_per_iter": "1e5"}).section("trainer")
    assert converted.steps_per_iter == 100000 and type(converted.steps_per_iter) is int
    # ... but a quoted "50" is a string the user wrote on purpose: rejected, never coerced.
    with pytest.raises(ConfigError, match="trainer.steps_per_iter: expected an integer, got str '50'"):
        _resolve(registry, {"steps_per_iter": "50"})
    assert opts.lr == 1.0 and type(opts.lr) is float
    assert opts.use_cuda is True


@pytest.mark.parametrize(
    ("run", "needle"),
    [
        ({"keep_last": 0}, "run.keep_last: must be >= 1, got 0"),
        ({"seed": -1}, "run.seed: must be >= 0"),
        ({"max_train_iters": 0}, "run.max_train_iters: must be >= 1"),
        ({"device": "gpu"}, "run.device: expected 'cpu', 'cuda', 'cuda:N' or 'auto', got 'gpu'"),
        ({"chekpoint_every": 3}, "run.chekpoint_every: unknown key (did you mean 'checkpoint_every'?)"),
        ({"progress": "no"}, "run.progress: expected true or false"),
    ],
)
def test_run_section_is_validated(registry: Registry, run: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match="invalid config cfg.yaml") as info:
        _resolve(registry, {}, run)
    assert needle in str(info.value)


def test_every_problem_of_a_config_is_reported_at_once(registry: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(registry, {"lr": -1, "stepsperiter": 1}, {"keep_last": 0}, trainr={"x": 1})
    msg = str(info.value)
    assert "(4 problems)" in msg
    for needle in ("trainer.lr: must be > 0.0", "trainer.stepsperiter: unknown key", "run.keep_last: must be >= 1",
                   "trainr: unknown section (did you mean 'trainer'?)"):
        assert needle in msg
    assert len(info.value.problems) == 4


def test_unknown_component_lists_available_names(registry: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"trainer": {"name": "tyo"}}, registry, "cfg.yaml")
    assert "unknown trainer 'tyo'; available: toy (did you mean 'toy'?)" in str(info.value)
    with pytest.raises(ConfigError, match="trainer: missing section"):
        resolve({"run": {}}, registry, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"trainer.name: missing; pick one of: toy"):
        resolve({"trainer": {"lr": 1}}, registry, "cfg.yaml")


def test_cross_field_validate_hook_is_applied() -> None:
    @dataclass
    class Buf:
        capacity: int = option(10, doc="c", min=1)
        batch_size: int = option(4, doc="b", min=1)

        def validate(self) -> list[tuple[str, str]]:
            return [("batch_size", "must be <= capacity")] if self.batch_size > self.capacity else []

    obj, problems = validate(Buf, {"capacity": 2, "batch_size": 4}, "buffer")
    assert obj is None and problems == ["buffer.batch_size: must be <= capacity"]
    obj, problems = validate(Buf, {"capacity": 8}, "buffer")
    assert problems == [] and obj.capacity == 8


# ---------------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------------


def test_overrides_set_add_and_delete() -> None:
    tree = {"trainer": {"name": "toy", "lr": 0.1, "inner": {"depth": 2}}}
    new, touched = apply_overrides(tree, ["trainer.lr=3e-2", "+trainer.steps_per_iter=7", "~trainer.inner",
                                          "+run.seed=4", "trainer.name=toy"])
    # values are parsed with yaml.safe_load ('3e-2' stays a string until the schema converts it)
    assert new == {"trainer": {"name": "toy", "lr": "3e-2", "steps_per_iter": 7}, "run": {"seed": 4}}
    assert tree == {"trainer": {"name": "toy", "lr": 0.1, "inner": {"depth": 2}}}  # input untouched
    assert touched == {"trainer.lr", "trainer.steps_per_iter", "run.seed", "trainer.name"}
    new, _ = apply_overrides(tree, ["trainer.inner.depth=[1, 2]", "trainer.lr=null"])
    assert new["trainer"]["inner"]["depth"] == [1, 2] and new["trainer"]["lr"] is None


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("+trainer.lr=1", "key 'trainer.lr' already exists; drop the '+'"),
        ("~trainer.nope", "no key 'trainer.nope' to delete"),
        ("trainer.lr", "expected KEY=VALUE, +KEY=VALUE or ~KEY"),
        ("trainer.lr.x=1", "'trainer.lr' is not a mapping"),
        ("trainer.lr=[1, 2", "value is not valid YAML"),
        ("trainer.lr=!!python/object/apply:os.system [x]", "value is not valid YAML"),
    ],
)
def test_bad_overrides_are_config_errors(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({"trainer": {"name": "toy", "lr": 0.1}}, [override])
    assert needle in str(info.value)


def test_all_bad_overrides_are_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({"trainer": {"lr": 0.1}}, ["trainer.lr.x=1", "~trainer.b", "trainer.lr=2"])
    assert len(info.value.problems) == 2
    assert "trainer.lr.x" in str(info.value) and "trainer.b" in str(info.value)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("trainer.nope=1", "trainer.nope: unknown key (from a command-line override)"),
        ("trainer.lrr=1", "trainer.lrr: unknown key (did you mean 'lr'?) (from a command-line override)"),
        ("trainr.lr=1", "trainr: unknown section (did you mean 'trainer'?)"),
    ],
)
def test_overrides_of_missing_keys_fail_validation(registry: Registry, tmp_path: Path, override: str,
                                                   needle: str) -> None:
    """A plain override may set a schema field the file leaves at its default; a key the schema
    does not know is an error that names the override."""
    p = tmp_path / "cfg.yaml"
    p.write_text("trainer: {name: toy}\n")
    with pytest.raises(ConfigError) as info:
        load_config(p, [override], registry)
    assert needle in str(info.value)


def test_an_override_that_switches_a_component_drops_the_file_keys_it_does_not_take(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """update_schedule.name=replay_ratio over a file's fixed schedule: its updates_per_collect is
    dropped (logged), a key the new schedule takes is kept; an override's misspelt key and a
    file's key unknown to the component it names stay errors."""
    import logging

    from lzkernel.pluginmanager import Kernel

    registry = Kernel([], autoload=True).registry
    p = tmp_path / "cfg.yaml"
    muzero = (Path(__file__).resolve().parents[2] / "configs" / "cartpole_muzero.yaml").read_text()
    assert "  updates_per_collect: 100\n" in muzero
    p.write_text(muzero.replace("  updates_per_collect: 100\n", "  updates_per_collect: 7\n  min_updates: 3\n"))
    with pytest.raises(ConfigError, match="min_updates: unknown key"):  # the file's typo for 'fixed'
        load_config(p, [], registry)
    with caplog.at_level(logging.INFO, logger="lzkernel"):
        config = load_config(p, ["update_schedule.name=replay_ratio", "update_schedule.ratio=0.5"], registry)
    assert config.to_dict()["update_schedule"] == {"name": "replay_ratio", "ratio": 0.5, "min_updates": 3}
    assert "dropped the config's update_schedule.updates_per_collect" in caplog.text
    with pytest.raises(ConfigError, match=r"update_schedule.ratoi: unknown key .*from a command-line override"):
        load_config(p, ["update_schedule.name=replay_ratio", "update_schedule.ratoi=0.5"], registry)
    with pytest.raises(ConfigError, match="min_updates: unknown key"):  # named again, not switched: checked
        load_config(p, ["update_schedule.name=fixed"], registry)
    # Nested options: MuZero's policy.model keys that UniZero's model does not take are dropped
    # too; what is left is the pairing problem, not unknown keys.
    with caplog.at_level(logging.INFO, logger="lzkernel"), pytest.raises(ConfigError) as info:
        load_config(Path(__file__).resolve().parents[2] / "configs" / "cartpole_muzero.yaml", ["policy.name=unizero"],
                    registry)
    assert "unknown key" not in str(info.value) and "incompatible components" in str(info.value)
    assert "policy.model.type, policy.model.latent_dim" in caplog.text


def test_override_sets_a_field_left_at_its_default(registry: Registry, tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text("trainer: {name: toy}\n")
    assert load_config(p, ["trainer.lr=0.5"], registry).section("trainer").lr == 0.5


def test_problem_from_an_override_is_marked(registry: Registry, tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text("trainer: {name: toy, lr: 0.1}\n")
    with pytest.raises(ConfigError, match=r"trainer.lr: must be > 0.0, got -1.0 \(from a command-line override\)"):
        load_config(p, ["trainer.lr=-1"], registry)


# ---------------------------------------------------------------------------------------------
# YAML loading
# ---------------------------------------------------------------------------------------------


def test_yaml_python_tags_never_execute(tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    p = tmp_path / "cfg.yaml"
    p.write_text(f'run: {{seed: 1}}\ntrainer: !!python/object/apply:os.system ["touch {sentinel}"]\n')
    with pytest.raises(ConfigError) as info:
        load_yaml(p)
    assert f"{p}:2:10:" in str(info.value) and "tags such as !!python/object are refused" in str(info.value)
    assert not sentinel.exists()


def test_yaml_syntax_error_has_file_line_column(tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text("run:\n\tseed: 1\ntrainer: {name: demo_counter}\n")
    with pytest.raises(ConfigError, match=rf"^{p}:2:1: found character '\\t' that cannot start any token$"):
        load_yaml(p)


@pytest.mark.parametrize(("text", "needle"), [("- a\n- b\n", "the top level must be a mapping"),
                                              ("just text\n", "the top level must be a mapping")])
def test_yaml_top_level_must_be_a_mapping(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_yaml(p)


def test_empty_yaml_is_an_empty_mapping(tmp_path: Path) -> None:
    p = tmp_path / "cfg.yaml"
    p.write_text("# nothing\n")
    assert load_yaml(p) == {}


# ---------------------------------------------------------------------------------------------
# `lzkernel config` in-process (the demo plugin installed and on sys.path)
# ---------------------------------------------------------------------------------------------


def test_config_command_prints_resolved_config(demo_path: SimpleNamespace, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out", trainer={"lr": "3e-4"})
    cfg.write_text(cfg.read_text().replace("'3e-4'", "3e-4"))
    assert "lr: 3e-4\n" in cfg.read_text()  # unquoted, as a user writes it
    assert main(["config", str(cfg), "+trainer.eval_every=3", "~trainer.lr", "+trainer.steps_per_iter=4",
                 "run.seed=5" if "seed:" in cfg.read_text() else "+run.seed=5"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["trainer"] == {"name": "demo_counter", "steps_per_iter": 4, "lr": 0.1, "target": 3.0,
                              "eval_every": 3, "noise": 0.0, "sleep_s": 0.0}
    assert out["comm"] == {"name": "local"} and out["run"]["out_dir"] == str(tmp_path / "out")
    assert out["run"]["seed"] == 5

    assert main(["config", str(cfg)]) == 0
    lr = yaml.safe_load(capsys.readouterr().out)["trainer"]["lr"]
    assert type(lr) is float and math.isclose(lr, 3e-4)


def test_config_explain_lists_keys_with_docs(demo_path: SimpleNamespace, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cfg = demo_config(tmp_path / "demo.yaml", tmp_path / "out")
    assert main(["config", str(cfg), "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines}
    assert "Step size of the toy parameter update." in rows["trainer.lr"]
    assert "float" in rows["trainer.lr"]
    assert "run.keep_last" in rows and "run.seed" in rows
    # each section's component and the registered choices for it
    assert "'demo_counter'" in rows["trainer.name"] and "One of: " in rows["trainer.name"]
    assert "demo_counter" in rows["trainer.name"].split("One of: ")[1]


# ---------------------------------------------------------------------------------------------
# The bad-input menu through the real CLI: exit 2, one paragraph, no traceback
# ---------------------------------------------------------------------------------------------

GOOD_RUN = "run: {{out_dir: {out}, max_train_iters: 1, progress: false}}\n"

BAD_INPUTS = {
    "unclosed-bracket": (GOOD_RUN + "trainer: {{name: demo_counter, lr: [0.1\n", [], ["demo.yaml:3:1:", "expected ','"]),
    "tab-indent": ("run:\n\tseed: 1\ntrainer: {{name: demo_counter}}\n", [],
                   ["demo.yaml:2:1: found character '\\t' that cannot start any token"]),
    "unknown-key": (GOOD_RUN + "trainer: {{name: demo_counter, steps_per_itr: 3}}\n", [],
                    ["trainer.steps_per_itr: unknown key (did you mean 'steps_per_iter'?)"]),
    "wrong-type": (GOOD_RUN + "trainer: {{name: demo_counter, steps_per_iter: \"ten\"}}\n", [],
                   ["trainer.steps_per_iter: expected an integer, got str 'ten'"]),
    "yaml11-yes": (GOOD_RUN + "trainer: {{name: demo_counter, steps_per_iter: yes}}\n", [],
                   ["trainer.steps_per_iter: expected an integer, got str 'yes'"]),  # YAML 1.2: not a bool
    "yaml11-no": ("run: {{out_dir: {out}, deterministic: no}}\ntrainer: {{name: demo_counter}}\n", [],
                  ["run.deterministic: expected true or false, got 'no'"]),
    "yaml11-off-override": (GOOD_RUN + "trainer: {{name: demo_counter}}\n", ["run.progress=off"],
                            ["run.progress: expected true or false, got 'off' (from a command-line override)"]),
    "yaml11-version": ("run: {{out_dir: {out}, device: 3.10}}\ntrainer: {{name: demo_counter}}\n", [],
                       ["run.device: expected a string, got float 3.1"]),
    "out-of-range": (GOOD_RUN + "trainer: {{name: demo_counter, lr: 0}}\n", [], ["trainer.lr: must be > 0.0, got 0.0"]),
    "unknown-component": (GOOD_RUN + "trainer: {{name: demo_countr}}\n", [],
                          ["unknown trainer 'demo_countr'; available: ", "demo_counter",
                           "(did you mean 'demo_counter'?)"]),
    "override-missing-key": (GOOD_RUN + "trainer: {{name: demo_counter}}\n", ["trainer.lrr=0.5"],
                             ["trainer.lrr: unknown key (did you mean 'lr'?) (from a command-line override)"]),
    "two-problems": (GOOD_RUN + "trainer: {{name: demo_counter, lr: -1, stepsperiter: 2}}\n", [],
                     ["(2 problems)", "trainer.lr: must be > 0.0", "trainer.stepsperiter: unknown key"]),
    "missing-file": (None, [], ["config file not found"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_without_traceback(case: str, plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    text, overrides, needles = BAD_INPUTS[case]
    cfg = tmp_path / "demo.yaml"
    if text is not None:
        cfg.write_text(text.format(out=tmp_path / "out"))
    proc = lzk(["run", cfg, *overrides], clean_env(plugin_site.demo), cwd=tmp_path)
    err = assert_config_error(proc, *needles)
    if case != "two-problems":
        assert len(err.splitlines()) == 1, err  # one problem, one line (file, key, what is expected)
    assert not (tmp_path / "out").exists()  # nothing was started


def test_python_tag_is_refused_and_never_runs(plugin_site: SimpleNamespace, tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    cfg = tmp_path / "demo.yaml"
    cfg.write_text(f'run: {{out_dir: {tmp_path / "out"}}}\n'
                   f'trainer: !!python/object/apply:os.system ["touch {sentinel}"]\n')
    proc = lzk(["run", cfg], clean_env(plugin_site.demo), cwd=tmp_path)
    assert_config_error(proc, "demo.yaml:2:10:", "python/object/apply:os.system", "tags such as !!python/object are refused")
    # ... and through an override value
    good = demo_config(tmp_path / "good.yaml", tmp_path / "out")
    proc = lzk(["config", good, f'trainer.lr=!!python/object/apply:os.system ["touch {sentinel}"]'],
               clean_env(plugin_site.demo), cwd=tmp_path)
    assert_config_error(proc, "value is not valid YAML")
    assert not sentinel.exists()
    assert not (tmp_path / "out").exists()


def test_booleans_are_yaml_1_2() -> None:
    """Only true/false are booleans; YAML 1.1's yes/no/on/off stay text (the Norway problem)."""
    from lzkernel.config.strict_yaml import parse

    got = parse("a: yes\nb: no\nc: On\nd: true\ne: FALSE\nf: True\ncountry: NO\n")
    assert got == {"a": "yes", "b": "no", "c": "On", "d": True, "e": False, "f": True, "country": "NO"}
    assert yaml.safe_load("a: yes")["a"] is True  # PyYAML's own loader is untouched
