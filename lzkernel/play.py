"""``lzkernel play RUN_DIR_OR_CHECKPOINT``: play a board game against a trained agent in the terminal.

The agent is the checkpoint's policy, restored as ``lzkernel eval`` restores it
(:func:`lzkernel.evaluate.load_policy`), choosing its moves greedily (``mode="eval"``) by its own
search. The env must be a two-player :class:`~lzkernel.TextGameEnvSpec` (OpenSpiel games are):
its simulator plays the game, the spec draws each position before the person's move and names
the moves. A move is typed as its number or its name (``x(1,1)``, or ``1,1`` without the
player's mark and brackets, as the game names its moves); ``q`` (``quit``, ``exit``) or the end
of the input stops, and Ctrl-C too, after the summary of the games played. Sides: the person moves first, second,
or alternately (the default: first in odd-numbered games).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable, Sequence

from lzkernel.errors import ConfigError
from lzkernel.roles.env import TextGameEnvSpec, make_checked_vector

SIDES = ("alternate", "first", "second")
QUIT = ("q", "quit", "exit")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``play`` subcommand's parser under ``sub`` (the CLI's subparsers)."""
    play = sub.add_parser("play", help="play a board game against a trained agent in the terminal",
                          description="Load a run's checkpoint (as `lzkernel eval` does) and play its two-player "
                                      "board game against the agent: the board is drawn before each of your moves; "
                                      "type a move's number or name, q to stop.")
    play.add_argument("target", metavar="RUN_DIR_OR_CHECKPOINT", help="a run's out_dir or a checkpoint directory")
    play.add_argument("overrides", nargs="*", default=[],
                      help="a.b=VALUE on the checkpoint's config (e.g. policy.eval_num_simulations=50)")
    play.add_argument("--checkpoint", default="last", metavar="last|best|PATH",
                      help="which checkpoint of RUN_DIR (default: last)")
    play.add_argument("--games", type=int, default=1, metavar="N", help="games to play (default 1)")
    play.add_argument("--side", choices=SIDES, default="alternate",
                      help="you move first, second, or first in odd-numbered games (default alternate)")
    return play


def command(args: argparse.Namespace, kernel: Any) -> int:
    """``lzkernel play`` with the parsed ``args``, the plugins loaded in ``kernel``."""
    kernel.raise_on_errors()
    play(kernel, args.target, checkpoint=args.checkpoint, overrides=args.overrides, games=args.games, side=args.side,
         read=_read_echoing)
    return 0


def normalise(text: str) -> str:
    """A move name as typed or as the game writes it, compared loosely: lower case, no spaces."""
    return "".join(text.lower().split())


def _mark(names: Sequence[str]) -> str:
    """The mover's mark that starts every one of the (normalised) ``names``: the letters that
    begin their common prefix (``x`` of ``x(0,1)`` and ``x(2,2)``; ``b`` of go's ``b e5`` and
    ``b pass``); of a single name, its leading letters unless they are the whole name (``x`` of
    ``x(2,2)``, nothing of ``bpass``)."""
    prefix = os.path.commonprefix(list(names)) if names else ""
    letters = len(prefix) - len(prefix.lstrip("abcdefghijklmnopqrstuvwxyz"))
    return "" if len(names) == 1 and letters == len(prefix) else prefix[:letters]


def parse_move(typed: str, names: dict[int, str]) -> int | None:
    """The move ``typed`` names among the legal ``names`` {action: name}: its number (ASCII
    digits), its name, or its name without the mover's mark and brackets (``1,1`` for ``x(1,1)``,
    ``e5`` for go's ``B e5``); None if none fits, several do, or nothing was typed."""
    word = normalise(typed)
    if not word:
        return None
    if re.fullmatch(r"[0-9]+", word) and int(word) in names:
        return int(word)
    normalised = {a: normalise(name) for a, name in names.items()}
    exact = [a for a, name in normalised.items() if name == word]
    if len(exact) == 1:
        return exact[0]
    mark = _mark(list(normalised.values()))
    bare = word.strip("()")
    loose = [a for a, name in normalised.items() if (rest := name[len(mark):].strip("()")) and rest == bare]
    return loose[0] if len(loose) == 1 else None


def _ask(names: dict[int, str], read: Callable[[str], str], write: Callable[[str], None]) -> int | None:
    """The person's next move among ``names`` (asked again until one fits); None to stop."""
    listing = "  ".join(f"{a}={name}" for a, name in names.items())
    while True:
        try:
            typed = read(f"your move [{listing}]: ")
        except EOFError:
            return None
        if normalise(typed) in QUIT:
            return None
        move = parse_move(typed, names)
        if move is not None:
            return move
        write(f"'{typed.strip()}' is not a legal move here: type one of the numbers or names listed, or q")


def _one_game(spec: Any, sim: Any, policy: Any, start: Any, person: int, read: Callable[[str], str],
              write: Callable[[str], None]) -> str | None:
    """One game from ``start`` with the person as player ``person`` (1 or 2): ``win``, ``draw`` or
    ``loss`` for the person, or None when they stopped."""
    import numpy as np

    state = sim.clone(start)
    view = sim.observe([state])  # obs [1, *O], legal [1, A], to_play [1] of the position
    policy.reset_envs([0], "eval")  # a new game: no search state of the last one carries over
    moves, score = 0, 0.0  # score: the person's return (each move's reward is its mover's; zero-sum)
    while not view.terminal[0]:
        mover = int(view.to_play[0])
        if mover == person:
            write(spec.state_text(state))
            move = _ask({int(a): spec.action_text(state, int(a)) for a in np.flatnonzero(view.legal[0])}, read, write)
            if move is None:
                return None
        else:
            res = policy.act(view.obs, view.legal, view.to_play, mode="eval", env_ids=np.zeros(1, np.int64),
                             temperature=1.0, epsilon=0.0, timestep=np.array([moves], np.int64), states=[state])
            move = int(res.action[0])
            write(f"the agent plays {spec.action_text(state, move)} (its value estimate {float(res.root_value[0]):+.2f})")
        view = sim.step([state], np.array([move], np.int64))
        score += float(view.reward[0]) if mover == person else -float(view.reward[0])
        moves += 1
    write(spec.state_text(state))
    return "win" if score > 0 else "loss" if score < 0 else "draw"


def _not_a_board_game(env: str | None, ckpt: Any) -> str:
    return (f"env '{env}' of {ckpt} is not a two-player board game that can be shown as text (its env spec is no "
            "TextGameEnvSpec); use `lzkernel eval` for it")


def _read_echoing(prompt: str) -> str:
    """:func:`input`, echoing the line read when it does not come from a terminal (a transcript
    of piped moves then reads as typed)."""
    text = input(prompt)
    if not sys.stdin.isatty():
        print(text)
    return text


def play(kernel: Any, target: str, *, checkpoint: str = "last", overrides: Sequence[str] = (), games: int = 1,
         side: str = "alternate", read: Callable[[str], str] = input,
         write: Callable[[str], None] = print) -> dict[str, int]:
    """Play ``games`` games against the agent of checkpoint ``target``/``checkpoint``; the
    person's results ``{"win": n, "draw": n, "loss": n, "played": n}`` (a game stopped by ``q``
    is not counted)."""
    from lzkernel.evaluate import checkpoint_config, find_checkpoint, load_policy

    if games < 1:
        raise ConfigError(f"--games must be >= 1, got {games}")
    if side not in SIDES:
        raise ConfigError(f"--side must be one of {', '.join(SIDES)}, got {side!r}")
    ckpt, _ = find_checkpoint(target, checkpoint)
    env = checkpoint_config(kernel, ckpt, overrides).name("env")
    if TextGameEnvSpec not in kernel.registry.get("env", env).provides:  # before torch and the weights load
        raise ConfigError(_not_a_board_game(env, ckpt))
    loaded = load_policy(kernel, target, checkpoint=checkpoint, overrides=overrides)
    spec, policy = loaded.env_spec, loaded.policy
    if not (isinstance(spec, TextGameEnvSpec) and spec.two_player):
        raise ConfigError(_not_a_board_game(env, ckpt))
    if int(policy.target_spec.frame_stack) != 1:
        raise ConfigError(f"the policy of {loaded.checkpoint} stacks {policy.target_spec.frame_stack} observations; "
                          "lzkernel play supports 1")
    sim = spec.make_simulator()
    venv = make_checked_vector(spec, 1, int(loaded.config.run.seed))
    start = venv.reset().states[0]  # the game's first position (a SimulatorEnvSpec's envs give states)
    venv.close()
    results = {"win": 0, "draw": 0, "loss": 0, "played": 0}
    try:
        for game in range(games):
            person = {"first": 1, "second": 2}.get(side, 1 + game % 2)
            write(f"game {game + 1} of {games}: you are player {person}, {'first' if person == 1 else 'second'} to move")
            outcome = _one_game(spec, sim, policy, start, person, read, write)
            if outcome is None:
                write("stopped")
                break
            results["played"] += 1
            results[outcome] += 1
            write({"win": "you win", "draw": "a draw", "loss": "the agent wins"}[outcome])
    finally:  # Ctrl-C too: the games played are still summed up
        n = results["played"]
        write(f"{n} game{'s' if n != 1 else ''}: {results['win']} won, {results['draw']} drawn, {results['loss']} lost")
    return results
