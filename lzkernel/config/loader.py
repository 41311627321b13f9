"""Reading a config: strict YAML (safe tags, no duplicate keys, bounded aliases), the configs it
extends (``base:``, :mod:`lzkernel.config.inherit`), dotted overrides, resolution.

Resolution validates ``run`` against :class:`RunConfig` and every role section against the
schema of the component its ``name`` picks, collecting all problems before failing.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from lzkernel.component import ROLES
from lzkernel.config.inherit import load_with_bases
from lzkernel.config.run_config import RunConfig
from lzkernel.config.schema import suggest, to_dict, validate
from lzkernel.config.strict_yaml import AliasBombError, parse
from lzkernel.errors import ConfigError
from lzkernel.registry import Registry

log = logging.getLogger("lzkernel")

#: Sections a config may hold: ``run`` plus one per role.
SECTIONS: tuple[str, ...] = ("run",) + ROLES
#: Sections that may be left out, with the section used instead.
DEFAULT_SECTIONS: dict[str, dict[str, Any]] = {"comm": {"name": "local"}}


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` strictly (:func:`lzkernel.config.strict_yaml.parse`: safe tags only, no
    duplicate keys, bounded aliases). Every problem is one :class:`ConfigError` line that
    starts with ``file`` (``file:line:column`` where YAML knows the place)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except IsADirectoryError:
        run = f" (a run directory: its config is {p / 'config.yaml'})" if (p / "config.yaml").is_file() else ""
        raise ConfigError(f"config file {p} is a directory, not a YAML file{run}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a UTF-8 text file (byte {exc.start} is {raw[exc.start:exc.start + 1]!r}); "
                          "a config is YAML text") from None
    return _parse_tree(text, str(p))


def load_tree(path: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """``path`` parsed strictly with the configs it extends (``base:``,
    :mod:`lzkernel.config.inherit`) merged under it; and, per dotted key a base set, that base."""
    return load_with_bases(Path(path), load_yaml)


def _parse_tree(text: str, where: str) -> dict[str, Any]:
    try:
        data = parse(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        reason = exc.problem or exc.context or "invalid YAML"
        if "constructor" in reason or "tag" in reason:
            reason += " (only plain YAML is accepted: tags such as !!python/object are refused)"
        raise ConfigError(f"{place}: {reason}") from None
    except AliasBombError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.reader.ReaderError as exc:  # a control character: binary data in a text file
        raise ConfigError(f"{where}: character {exc.position}: unacceptable character "
                          f"#x{exc.character if isinstance(exc.character, int) else ord(exc.character):04x} "
                          "(not a YAML text file?)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: invalid YAML: {' '.join(str(exc).split())}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(item: str) -> tuple[str, str, str | None]:
    """``(op, dotted key, value text)`` of an override word: op ``+``, ``~`` or ""; the value
    None when there is no ``=`` (``~a.b``, or a malformed word)."""
    op = item[0] if item[:1] in ("+", "~") else ""
    key, sep, raw = (item[1:] if op else item).partition("=")
    return op, key.strip(), raw if sep else None


def apply_overrides(tree: dict[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], set[str]]:
    """Apply ``a.b=v`` (set a key), ``+a.b=v`` (add a key that must not exist yet), ``~a.b``
    (delete a key that must exist).

    ``a.b=v`` may set a key the file leaves at its default: whether ``a.b`` exists at all is the
    schema's call, so a misspelt key fails validation with a did-you-mean that says it came from
    an override. Values are parsed as strict YAML (``[1, 2]``, ``null``, ``true`` work).
    Returns the new tree and the dotted keys that came from overrides (for error messages).
    """
    tree = copy.deepcopy(tree)
    touched: set[str] = set()
    problems: list[str] = []
    for item in overrides:
        op, key, raw = parse_override(item)
        if not key or (op != "~" and raw is None):
            problems.append(f"override '{item}': expected KEY=VALUE, +KEY=VALUE or ~KEY")
            continue
        *parents, leaf = key.split(".")
        node: Any = tree
        path: list[str] = []
        ok = True
        for part in parents:
            path.append(part)
            if not isinstance(node, dict):
                problems.append(f"override '{item}': '{'.'.join(path[:-1])}' is not a mapping")
                ok = False
                break
            if part not in node:
                if op != "~":
                    node[part] = {}
                else:
                    problems.append(f"override '{item}': no key '{'.'.join(path)}'{suggest(part, node)}")
                    ok = False
                    break
            node = node[part]
        if not ok:
            continue
        if not isinstance(node, dict):
            problems.append(f"override '{item}': '{'.'.join(parents)}' is not a mapping")
            continue
        if op == "~":
            if leaf not in node:
                problems.append(f"override '{item}': no key '{key}' to delete{suggest(leaf, node)}")
            else:
                del node[leaf]
            continue
        if op == "+" and leaf in node:
            problems.append(f"override '{item}': key '{key}' already exists; drop the '+' to change it")
            continue
        try:
            node[leaf] = parse(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problems.append(f"override '{item}': value is not valid YAML ({' '.join(str(exc).split())})")
            continue
        touched.add(key)
    if problems:
        raise ConfigError("\n".join(problems), problems)
    return tree, touched


@dataclass
class ResolvedConfig:
    """A validated config: the run settings plus, per role, the component name and its options."""

    run: RunConfig
    sections: dict[str, tuple[str, Any]] = field(default_factory=dict)
    source: str = "<config>"

    def section(self, role: str) -> Any:
        entry = self.sections.get(role)
        return entry[1] if entry else None

    def name(self, role: str) -> str | None:
        entry = self.sections.get(role)
        return entry[0] if entry else None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what ``config.yaml`` in the run directory holds)."""
        out: dict[str, Any] = {"run": to_dict(self.run)}
        for role in ROLES:
            if role in self.sections:
                name, options = self.sections[role]
                body = to_dict(options) if options is not None else {}
                out[role] = {"name": name, **body}
        return out

    def to_yaml(self) -> str:
        """What is written and shown: :meth:`to_dict` with secrets redacted (:mod:`lzkernel.config.redact`)."""
        from lzkernel.config.redact import redact_tree

        return yaml.safe_dump(redact_tree(self.to_dict()), sort_keys=False, default_flow_style=None)


def resolve(tree: Mapping[str, Any], registry: Registry, source: str = "<config>",
            from_overrides: set[str] | None = None, origins: Mapping[str, str] | None = None,
            switched: set[str] | None = None) -> ResolvedConfig:
    """Validate the whole tree; raise one :class:`ConfigError` listing every problem (a problem
    with a key that a command-line override or a base config set says so: ``origins`` maps the
    dotted keys that bases set to their file). ``switched``: the roles whose component an
    override changed (:func:`_switch_keys`)."""
    problems: list[str] = []
    from_overrides = from_overrides or set()
    switched = switched or set()
    origins = origins or {}
    for key in tree:
        if key not in SECTIONS:
            problems.append(f"{key}: unknown section{suggest(str(key), SECTIONS)}; sections are {', '.join(SECTIONS)}")

    run_data = tree.get("run", {})
    run_cfg = None
    if not isinstance(run_data, dict):
        problems.append(f"run: expected a mapping, got {type(run_data).__name__}")
    else:
        run_cfg, run_problems = validate(RunConfig, run_data, "run")
        problems += run_problems

    sections: dict[str, tuple[str, Any]] = {}
    if "trainer" not in tree:
        problems.append("trainer: missing section (it names the trainer to run)")
    for role in ROLES:
        data = tree.get(role, DEFAULT_SECTIONS.get(role))
        if data is None:
            continue
        if not isinstance(data, dict):
            problems.append(f"{role}: expected a mapping with a 'name' key, got {type(data).__name__}")
            continue
        name = data.get("name")
        if not isinstance(name, str) or not name:
            available = ", ".join(registry.names(role)) or "(none registered)"
            problems.append(f"{role}.name: missing; pick one of: {available}")
            continue
        try:
            component = registry.get(role, name)
        except ConfigError as exc:
            problems.append(f"{role}.name: {exc}")
            continue
        body = {k: v for k, v in data.items() if k != "name"}
        if role in switched:
            body = _switch_keys(role, name, body, component.config, from_overrides)
        if component.config is None:
            for key in body:
                problems.append(f"{role}.{key}: unknown key ({role} '{name}' takes no options)")
            sections[role] = (name, None)
            continue
        options, section_problems = validate(component.config, body, role)
        problems += section_problems
        sections[role] = (name, options)

    if problems:
        annotated = []
        for p in problems:
            key = p.split(":", 1)[0]
            if key in from_overrides:
                p += " (from a command-line override)"
            elif key in origins:
                p += f" (set in base config {origins[key]})"
            annotated.append(p)
        raise ConfigError(_listing(f"invalid config {source}", annotated), annotated)
    assert run_cfg is not None
    return ResolvedConfig(run_cfg, sections, source)


def _switch_keys(role: str, name: str, body: dict[str, Any], schema: type | None,
                 from_overrides: set[str]) -> dict[str, Any]:
    """The options of a section whose component an override switched to ``name``: the config
    file's keys that ``name`` does not take (nested ones too: ``policy.model.type``) belonged to
    the component it named, and are dropped (logged); the keys it takes are kept, and so is
    every key an override set (a misspelt one stays an error)."""
    dropped: list[str] = []
    kept = _taken(body, schema, role, from_overrides, dropped)
    if dropped:
        log.info("%s.name=%s (an override): dropped the config's %s, which %s '%s' does not take", role, name,
                 ", ".join(dropped), role, name)
    return kept


def _taken(body: Mapping[str, Any], schema: type | None, prefix: str, from_overrides: set[str],
           dropped: list[str]) -> dict[str, Any]:
    """``body`` without the keys ``schema`` does not take that no override set (their dotted
    names appended to ``dropped``), nested dataclass options filtered alike."""
    hints = typing.get_type_hints(schema) if schema is not None else {}
    fields = {f.name for f in dataclasses.fields(schema)} if schema is not None else set()
    kept: dict[str, Any] = {}
    for k, v in body.items():
        key = f"{prefix}.{k}"
        if key in from_overrides:  # set whole by an override: checked as given
            kept[k] = v
        elif k not in fields:
            if any(t.startswith(key + ".") for t in from_overrides):
                kept[k] = v
            else:
                dropped.append(key)
        elif isinstance(v, Mapping) and isinstance(hints.get(k), type) and dataclasses.is_dataclass(hints[k]):
            kept[k] = _taken(v, hints[k], key, from_overrides, dropped)
        else:
            kept[k] = v
    return kept


def _listing(head: str, problems: Sequence[str]) -> str:
    """One line for one problem (``HEAD: problem``); a header line and one indented line each for
    several (``HEAD (n problems):``)."""
    if len(problems) == 1:
        return f"{head}: {problems[0]}"
    return f"{head} ({len(problems)} problems):\n  " + "\n  ".join(problems)


def _name_of(tree: Mapping[str, Any], role: str) -> Any:
    section = tree.get(role)
    return section.get("name") if isinstance(section, dict) else None


def load_config(path: str | Path, overrides: Sequence[str], registry: Registry) -> ResolvedConfig:
    """File → overrides → validated config whose components fit together
    (:func:`lzkernel.config.compat.check_compatibility`)."""
    tree, origins = load_tree(path)
    return config_from_tree(tree, overrides, registry, str(path), origins)


def config_from_tree(tree: dict[str, Any], overrides: Sequence[str], registry: Registry, source: str,
                     origins: Mapping[str, str] | None = None) -> ResolvedConfig:
    """:func:`load_config` from a config tree already read (``source`` names it in errors; the
    tree is not changed)."""
    from lzkernel.config.compat import check_compatibility

    from lzkernel.config.redact import remember_config

    remember_config(tree, overrides)  # before anything can fail: an error must not print them
    before = {role: _name_of(tree, role) for role in ROLES}
    tree, touched = apply_overrides(tree, overrides)
    switched = {role for role in ROLES if f"{role}.name" in touched and _name_of(tree, role) != before[role]}
    config = resolve(tree, registry, source, touched, origins, switched)
    problems = check_compatibility(config, registry)
    if problems:
        raise ConfigError(_listing(f"incompatible components in {source}", problems), problems)
    return config
