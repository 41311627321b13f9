"""Config files: inheritance (``base:``, lzkernel.config.inherit) — merge rules, relative paths, chains and
lists of bases, where a bad key came from, the one-line errors, and the shipped variant configs
being their base plus exactly the changes their comments name — and ``lzkernel config --diff``."""
from __future__ import annotations

from pathlib import Path

import pytest

from lzkernel import ConfigError
from lzkernel.config.inherit import MAX_DEPTH, dotted_keys, merge
from lzkernel.config.loader import load_config, load_tree
from lzkernel.pluginmanager import Kernel

from ._util import REPO, assert_config_error, clean_env, lzk

CONFIGS = REPO / "configs"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_mappings_merge_and_everything_else_replaces() -> None:
    under = {"run": {"seed": 0, "out_dir": "a"}, "policy": {"name": "muzero", "model": {"latent_dim": 128, "ssl": True},
                                                            "sizes": [1, 2, 3]}}
    over = {"run": {"out_dir": "b"}, "policy": {"model": {"ssl": False}, "sizes": [4]}}
    assert merge(under, over) == {"run": {"seed": 0, "out_dir": "b"},
                                  "policy": {"name": "muzero", "model": {"latent_dim": 128, "ssl": False}, "sizes": [4]}}
    assert under["policy"]["model"]["ssl"] is True  # inputs untouched
    # Another component in a section: its options replace the base's whole (they belong to another schema).
    assert merge({"trainer": {"name": "muzero", "reanalyze_ratio": 0.0}},
                 {"trainer": {"name": "rezero", "reuse_search": True}}) == {"trainer": {"name": "rezero", "reuse_search": True}}
    # The same name (or none given) merges.
    assert merge({"trainer": {"name": "rezero", "a": 1}}, {"trainer": {"name": "rezero", "b": 2}}) == \
        {"trainer": {"name": "rezero", "a": 1, "b": 2}}
    # Only a top-level section: a nested mapping with a name merges like any other.
    assert merge({"policy": {"model": {"name": "a", "x": 1}}}, {"policy": {"model": {"name": "b"}}}) == \
        {"policy": {"model": {"name": "b", "x": 1}}}
    assert dotted_keys({"a": {"b": 1, "c": {"d": 2}}}) == ["a", "a.b", "a.c", "a.c.d"]


def test_relative_paths_chains_and_lists_of_bases(tmp_path: Path) -> None:
    _write(tmp_path / "common" / "grand.yaml", "run: {seed: 1, out_dir: g, log_every: 7}\ntrainer: {name: t, x: 1}\n")
    _write(tmp_path / "common" / "parent.yaml", "base: grand.yaml\nrun: {out_dir: p}\ntrainer: {y: 2}\n")
    _write(tmp_path / "extra.yaml", "run: {seed: 3}\ntrainer: {x: 9}\n")
    child = _write(tmp_path / "exp" / "child.yaml",
                   f"base: [../common/parent.yaml, {tmp_path / 'extra.yaml'}]\ntrainer: {{z: 3}}\n")
    tree, origins = load_tree(child)
    # parent over grand, extra over both (listed later), the child over all; no base key left
    assert tree == {"run": {"seed": 3, "out_dir": "p", "log_every": 7}, "trainer": {"name": "t", "x": 9, "y": 2, "z": 3}}
    where = {key: Path(f).name for key, f in origins.items()}  # the keys a base set, and which base
    assert where["run.log_every"] == "grand.yaml" and where["run.out_dir"] == "parent.yaml"
    assert where["run.seed"] == where["trainer.x"] == "extra.yaml" and "trainer.z" not in where


def test_a_bad_key_from_a_base_names_the_base(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.yaml", (CONFIGS / "cartpole_rezero.yaml").read_text().replace(
        "  td_steps: 5", "  td_stepz: 5"))
    child = _write(tmp_path / "child.yaml", "base: base.yaml\npolicy: {num_simulations: 0}\n")
    with pytest.raises(ConfigError) as err:
        load_config(child, [], Kernel().registry)
    problems = "\n".join(err.value.problems)
    assert "policy.td_stepz: unknown key" in problems and f"(set in base config {base})" in problems
    line = next(p for p in err.value.problems if p.startswith("policy.num_simulations"))
    assert "set in base config" not in line  # the child's own key
    # A config without bases, named with ./ or a doubled slash: no key is "from a base".
    for name in (f"{tmp_path}/./plain.yaml", f"{tmp_path}//plain.yaml"):
        _write(tmp_path / "plain.yaml", "trainer: {name: rezero}\nrun: {bogus: 1}\n")
        with pytest.raises(ConfigError) as err:
            load_config(name, [], Kernel().registry)
        assert "run.bogus: unknown key" in str(err.value) and "base config" not in str(err.value)


@pytest.mark.parametrize("case,text,needle", [
    ("missing", "base: nowhere.yaml\n", "base: config file not found:"),
    ("type", "base: 3\n", "base: expected a config file name or a list of them, got 3"),
    ("empty list", "base: []\n", "base: expected a config file name or a list of them"),
    ("self", "base: cfg.yaml\n", "base: cfg.yaml makes a cycle"),
    ("no value", "base:\n", "base: expected a config file name or a list of them, got None"),
])
def test_bad_bases_are_one_line_errors(tmp_path: Path, case: str, text: str, needle: str) -> None:
    cfg = _write(tmp_path / "cfg.yaml", text + "trainer: {name: rezero}\n")
    with pytest.raises(ConfigError, match="base") as err:
        load_tree(cfg)
    assert str(err.value).startswith(f"{cfg}: ") and needle in str(err.value) and "\n" not in str(err.value)


def test_cycles_depth_and_a_base_that_does_not_parse(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", "base: b.yaml\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match=r"base: a.yaml makes a cycle \(.*a.yaml -> .*b.yaml -> .*a.yaml\)"):
        load_tree(tmp_path / "a.yaml")
    for i in range(MAX_DEPTH + 1):
        _write(tmp_path / f"d{i}.yaml", f"base: d{i + 1}.yaml\n" if i < MAX_DEPTH else "run: {seed: 0}\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_DEPTH} configs deep"):
        load_tree(tmp_path / "d0.yaml")
    assert load_tree(tmp_path / "d1.yaml")[0] == {"run": {"seed": 0}}  # exactly MAX_DEPTH deep is fine
    _write(tmp_path / "broken.yaml", "run: {seed: [1\n")
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'uses_broken.yaml'}: base: {tmp_path / 'broken.yaml'}:2:1: "):
        load_tree(_write(tmp_path / "uses_broken.yaml", "base: broken.yaml\n"))
    # An empty section (YAML null) would wipe the base's whole section: refused.
    _write(tmp_path / "full.yaml", "trainer: {name: rezero, reuse_search: true}\n")
    with pytest.raises(ConfigError, match="trainer: an empty section would replace the whole trainer section"):
        load_tree(_write(tmp_path / "empty.yaml", "base: full.yaml\ntrainer:\n"))


def test_the_cli_refuses_a_bad_base_with_exit_2(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "cfg.yaml", "base: missing.yaml\ntrainer: {name: rezero}\n")
    assert_config_error(lzk(["config", cfg], clean_env(), tmp_path), f"{cfg}: base: config file not found")


VARIANTS = {
    "cartpole_rezero_gumbel.yaml": ("cartpole_rezero.yaml", [
        "run.out_dir=runs/cartpole_rezero_gumbel", "policy.search_algorithm=gumbel", "policy.gumbel_max_considered=2",
        "policy.gumbel_rescale=tree"]),
    "cartpole_muzero_gumbel.yaml": ("cartpole_muzero.yaml", [
        "run.out_dir=runs/cartpole_muzero_gumbel", "policy.search_algorithm=gumbel", "policy.gumbel_max_considered=2"]),
    "cartpole_rezero_fast.yaml": ("cartpole_rezero.yaml", [
        "run.out_dir=runs/cartpole_rezero_fast", "run.threads=1", "trainer.reanalyze_min_transitions=1000",
        "policy.model.proj_hidden=256", "policy.model.proj_out=256", "policy.model.pred_hidden=128",
        "policy.model.pred_out=256", "policy.batch_size=64", "buffer.reuse_chain=segment",
        "evaluator.every_train_iters=100", "update_schedule.updates_per_collect=25"]),
    "cartpole_rezero_ez.yaml": ("cartpole_efficientzero.yaml", [
        "run.out_dir=runs/cartpole_rezero_ez", "~trainer", "+trainer.name=rezero", "+trainer.buffer_reanalyze_freq=1",
        "+trainer.reuse_search=true", "+trainer.reanalyze_min_transitions=2000", "buffer.reuse_chain=lightzero"]),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_config_is_its_base_with_the_named_changes(variant: str) -> None:
    """The shipped configs that extend another resolve to that config with exactly the changes
    written in them (as command-line overrides), nothing else."""
    base, changes = VARIANTS[variant]
    registry = Kernel().registry
    assert load_tree(CONFIGS / variant)[0].keys() and "base:" in (CONFIGS / variant).read_text()
    assert load_config(CONFIGS / variant, [], registry).to_dict() == \
        load_config(CONFIGS / base, changes, registry).to_dict()


def test_config_diff_against_a_file_and_a_run_directory(tmp_path: Path) -> None:
    """``lzkernel config A --diff B``: the keys whose resolved values differ, A's then B's; a run
    or checkpoint directory stands for its config.yaml; no difference says so."""
    env = clean_env()
    proc = lzk(["config", CONFIGS / "cartpole_rezero.yaml", "--diff", CONFIGS / "cartpole_rezero_gumbel.yaml"], env, tmp_path)
    assert proc.returncode == 1, proc.stderr  # as diff: 1 when they differ
    assert proc.stdout.splitlines() == [
        "policy.gumbel_max_considered: 16 → 2", "policy.gumbel_rescale: 'node' → 'tree'",
        "policy.search_algorithm: 'puct' → 'gumbel'", "run.out_dir: 'runs/cartpole_rezero' → 'runs/cartpole_rezero_gumbel'"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    resolved = lzk(["config", CONFIGS / "cartpole_rezero_gumbel.yaml", "policy.num_simulations=50"], env, tmp_path)
    (run_dir / "config.yaml").write_text(resolved.stdout)  # what a run directory holds: the resolved config
    proc = lzk(["config", CONFIGS / "cartpole_rezero_gumbel.yaml", "--diff", run_dir], env, tmp_path)
    assert proc.returncode == 1 and proc.stdout.splitlines() == ["policy.num_simulations: 25 → 50"]
    proc = lzk(["config", CONFIGS / "cartpole_rezero_gumbel.yaml", "policy.num_simulations=50", "--diff", run_dir],
               env, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "no differences"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_config_error(lzk(["config", CONFIGS / "cartpole_rezero.yaml", "--diff", empty], env, tmp_path),
                        f"--diff {empty}: a directory without config.yaml")


def test_config_diff_against_a_sweep_directory(tmp_path: Path) -> None:
    """A sweep's directory (``run --seeds``) compares with each seed's config: a change common to
    every seed is one line, a key whose value differs by seed shows each seed's value."""
    env = clean_env()
    sweep = tmp_path / "sweep"
    for seed in (0, 1, 2):
        (sweep / f"seed_{seed}").mkdir(parents=True)
        overrides = [f"run.seed={seed}", f"run.out_dir=runs/sweep/seed_{seed}", "policy.num_simulations=50"]
        resolved = lzk(["config", CONFIGS / "cartpole_rezero.yaml", *overrides], env, tmp_path)
        (sweep / f"seed_{seed}" / "config.yaml").write_text(resolved.stdout)
    proc = lzk(["config", CONFIGS / "cartpole_rezero.yaml", "run.seed=1", "--diff", sweep], env, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        "policy.num_simulations: 25 → 50",
        "run.out_dir: 'runs/cartpole_rezero' → seed_0: 'runs/sweep/seed_0', seed_1: 'runs/sweep/seed_1', "
        "seed_2: 'runs/sweep/seed_2'",
        "run.seed: 1 → seed_0: 0, seed_1: 1, seed_2: 2"]


def test_config_diff_of_a_long_sweep_shows_five_seeds_and_counts_the_rest(tmp_path: Path) -> None:
    from lzkernel.config.diff import MAX_SEEDS_SHOWN, diff_lines
    from lzkernel.config.loader import load_config
    from lzkernel.pluginmanager import Kernel

    registry = Kernel().registry
    for seed in range(7):
        (tmp_path / f"seed_{seed}").mkdir()
        resolved = load_config(CONFIGS / "cartpole_rezero.yaml", [f"run.seed={seed}"], registry).to_yaml()
        (tmp_path / f"seed_{seed}" / "config.yaml").write_text(resolved)
    this = load_config(CONFIGS / "cartpole_rezero.yaml", ["run.seed=3"], registry).to_dict()
    assert MAX_SEEDS_SHOWN == 5
    assert diff_lines(this, str(tmp_path), registry) == [
        "run.seed: 3 → seed_0: 0, seed_1: 1, seed_2: 2, seed_3: 3, seed_4: 4, ... (2 more)"]
    assert diff_lines(load_config(CONFIGS / "cartpole_rezero.yaml", [], registry).to_dict(),
                      str(tmp_path / "seed_0"), registry) == []
