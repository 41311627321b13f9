"""Opponents as the ``versus`` collector and evaluator configure them, checked at config time.

An opponent is a mapping ``{name: mcts, simulations: 200, label: mcts_weak}``: ``name`` picks the
bot (one of the env spec's ``opponents``), ``label`` (evaluator only) names its metrics, and every
other key is a param of the bot, passed to ``SimulatorEnvSpec.make_opponent``. The mapping is
checked in two steps:

* :func:`parse_opponent`, from the section's ``validate`` (no other section needed): ``name``
  present and a string, ``label`` a metric-name-safe string;
* :func:`opponent_check_problems`, from the component's ``check``: the env section, when its
  options provide :class:`OpponentOptions` (the ``openspiel`` env does), says whether the game
  offers the bot and accepts its params.

Pure Python (the plugin's entry module imports it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

#: Labels become part of metric names (``eval/vs_<label>/...``).
_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")


@runtime_checkable
class OpponentOptions(Protocol):
    """Env options that can tell, before anything is built, whether one of their game's bots
    exists with the given params (implemented by ``lzk_envs``' ``OpenSpielEnvConfig``)."""

    def opponent_problems(self, name: str, params: Mapping[str, Any]) -> list[str]:
        """One line per reason the bot cannot play the game, naming the bot and the game; empty: it can."""


@dataclass(frozen=True)
class OpponentSpec:
    """One configured opponent: the bot's ``name``, its ``params``, the ``label`` of its metrics."""

    name: str
    params: dict[str, Any]
    label: str


def default_label(name: str, params: Mapping[str, Any]) -> str:
    """The name, with the simulation count appended for the MCTS bot (``mcts1000``) when set."""
    if name == "mcts" and "simulations" in params:
        return f"mcts{params['simulations']}"
    return name


def parse_opponent(raw: Any, *, labelled: bool) -> tuple[OpponentSpec | None, list[tuple[str, str]]]:
    """``raw`` (a config mapping) as an :class:`OpponentSpec`, or None and the problems as
    ``(key relative to the mapping, message)`` pairs. ``labelled``: a ``label`` key is allowed."""
    if not isinstance(raw, Mapping):
        return None, [("", f"expected a mapping such as {{name: random}}, got {raw!r}")]
    problems: list[tuple[str, str]] = []
    name = raw.get("name")
    if name is None:
        problems.append(("name", "missing required key (the bot: random, mcts, perfect, ... as the env offers)"))
    elif not isinstance(name, str) or not name:
        problems.append(("name", f"expected the bot's name as a string, got {name!r}"))
    params = {k: v for k, v in raw.items() if k not in ("name", "label")}
    label = raw.get("label")
    if label is not None and not labelled:
        problems.append(("label", "only the evaluator's opponents take a label (it names their metrics)"))
    elif label is not None and not (isinstance(label, str) and _LABEL.match(label)):
        problems.append(("label", f"expected letters, digits, '_', '.' or '-' (it is part of metric names), "
                                  f"got {label!r}"))
    if problems:
        return None, problems
    return OpponentSpec(str(name), params, label or default_label(str(name), params)), []


def parse_opponents(raw: Sequence[Any]) -> tuple[list[OpponentSpec], list[tuple[str, str]]]:
    """The evaluator's list of opponents, with problems keyed ``[i].key``; labels must differ."""
    specs: list[OpponentSpec] = []
    problems: list[tuple[str, str]] = []
    if not raw:
        return [], [("", "expected at least one opponent, e.g. [{name: random}]")]
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        spec, bad = parse_opponent(item, labelled=True)
        problems += [(f"[{i}]" + (f".{key}" if key else ""), msg) for key, msg in bad]
        if spec is None:
            continue
        if spec.label in seen:
            problems.append((f"[{i}]", f"label {spec.label!r} repeats opponents[{seen[spec.label]}]'s; "
                                       "give one of them a distinct label"))
        seen.setdefault(spec.label, i)
        specs.append(spec)
    return specs, problems


def opponent_check_problems(env_options: Any, opponents: Sequence[tuple[str, OpponentSpec]]) -> list[str]:
    """``"key: reason"`` for each ``(key, opponent)`` the env section rejects; nothing when the
    env's options cannot tell (then ``make_opponent`` decides when the run builds the workers)."""
    if not isinstance(env_options, OpponentOptions):
        return []
    return [f"{key}: {line}" for key, spec in opponents
            for line in env_options.opponent_problems(spec.name, spec.params)]
