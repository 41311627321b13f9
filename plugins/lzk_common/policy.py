"""What every search-based policy object shares: an online model and its frozen target copy,
weight versions with lazily rebuilt inference snapshots, the policy RNG, the checkpoint state
and the parts of :class:`lzkernel.LearningPolicy` that follow from them.

Subclasses build their model and learner, then call :meth:`SearchPolicyBase.attach`; they
implement ``act``, ``learn`` and their value-source callbacks.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np
import torch
from torch import nn

from lzkernel import TargetSpec, generator_state, set_generator_state

Snapshot = TypeVar("Snapshot")


def stacked_obs_shape(obs_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
    """Shape O' of a frame-stacked observation: frames are stacked along the first axis."""
    obs_shape = tuple(int(s) for s in obs_shape)
    return (obs_shape[0] * frame_stack, *obs_shape[1:])


def frozen_copy(model: nn.Module) -> nn.Module:
    """An eval-mode deep copy of ``model`` whose parameters need no gradient (a target network)."""
    target = copy.deepcopy(model).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return target


class VersionedSnapshots(Generic[Snapshot]):
    """Inference snapshots of the online and the target model, each rebuilt lazily when its
    weight version moves (after a learner step, a target update, a load or a broadcast)."""

    def __init__(self, build: Callable[[str], Snapshot]) -> None:
        self._build = build
        self.versions = {"online": 0, "target": 0}
        self._slots: dict[str, list[Any]] = {"online": [-1, None], "target": [-1, None]}

    def get(self, which: str) -> Snapshot:
        """The snapshot of ``which`` ('online' or 'target') at its current version."""
        slot = self._slots[which]
        if slot[0] != self.versions[which]:
            slot[1], slot[0] = self._build(which), self.versions[which]
        return slot[1]

    def bump(self, *which: str) -> None:
        """The weights of ``which`` changed (both when none is named)."""
        for w in which or ("online", "target"):
            self.versions[w] += 1

    def drop(self) -> None:
        """Forget every snapshot (and so free its memory); the next ``get`` rebuilds."""
        self.bump()
        self._slots = {"online": [-1, None], "target": [-1, None]}


class SearchPolicyBase:
    """The online/target model pair, RNG, learner and checkpoint of a search-based policy.

    Args:
        cfg: the policy's options (:class:`~lzk_common.options.SearchOptions` with ``target_spec()``
            and ``exploration()``, as :class:`~lzk_common.options.SearchPolicyOptions` has).
        obs_shape: one env observation's shape (unstacked); the model sees ``frame_stack`` of them.
        num_actions: A.
        device: torch device of the models.
        seed: seeds the policy's ``np.random.Generator`` (noise, tie-breaking, sampling); torch's
            initial weights come from torch's global RNG (the run seeds it).
    """

    def __init__(self, cfg: Any, obs_shape: Sequence[int], num_actions: int, *,
                 device: str | torch.device, seed: int) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_actions = int(num_actions)
        self.env_obs_shape = tuple(obs_shape)
        self.obs_shape = stacked_obs_shape(self.env_obs_shape, cfg.target_spec().frame_stack)
        self.rng = np.random.default_rng(seed)
        self.model: nn.Module
        self.target_model: nn.Module | None = None
        self.learner: Any = None
        #: Training under random board symmetries (lzk_common.symmetry), when the subclass sets it.
        self.symmetries: Any = None
        #: Image augmentation of learner batches (lzk_common.image_augment), when the subclass sets it.
        self.augmentation: Any = None

    def attach(self, model: nn.Module, learner_factory: Callable[[nn.Module, nn.Module | None], Any], *,
               target: bool = True) -> None:
        """Install the online ``model`` (moved to the device), its frozen target copy (unless
        ``target`` is false: AlphaZero has none) and the learner
        ``learner_factory(model, target_model)``."""
        self.model = model.to(self.device)
        self.target_model = frozen_copy(self.model) if target else None
        self.learner = learner_factory(self.model, self.target_model)

    @property
    def models(self) -> tuple[nn.Module, ...]:
        """The online model, then the target model if there is one."""
        return (self.model,) if self.target_model is None else (self.model, self.target_model)

    # -- LearningPolicy ----------------------------------------------------------------------
    @property
    def target_spec(self) -> TargetSpec:
        return self.cfg.target_spec()

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        return self.cfg.exploration(train_iter, env_steps)

    @property
    def learner_steps(self) -> int:
        """Completed learner steps."""
        return int(self.learner.steps)

    def replicated_tensors(self) -> list[torch.Tensor]:
        return [t for m in self.models for t in (*m.parameters(), *m.buffers())]

    def updated_buffers(self) -> list[torch.Tensor]:
        """Default: the online model's floating buffers (a learner step moves them with this
        rank's batch); subclasses add the target's where their update touches it."""
        return [b for b in self.model.buffers() if b.is_floating_point()]

    def mark_weights_changed(self) -> None:
        """Subclasses invalidate their snapshots here."""

    def state_dict(self) -> dict[str, Any]:
        """Model, target model, learner state (optimizer, steps) and the policy RNG state:
        tensors and plain Python values, loadable with ``torch.load(weights_only=True)``."""
        state: dict[str, Any] = {"model": self.model.state_dict()}
        if self.target_model is not None:
            state["target_model"] = self.target_model.state_dict()
        state = {**state, "learner": self.learner.state_dict(), "rng": generator_state(self.rng)}
        if self.symmetries is not None:
            state["symmetry_rng"] = generator_state(self.symmetries.rng)
        if self.augmentation is not None:
            state["augment_rng"] = generator_state(self.augmentation.rng)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.target_model is not None:
            self.target_model.load_state_dict(state["target_model"])
        self.learner.load_state_dict(state["learner"])
        rng = state.get("rng")
        if rng is not None:
            set_generator_state(self.rng, rng)
        if self.symmetries is not None and "symmetry_rng" in state:
            set_generator_state(self.symmetries.rng, state["symmetry_rng"])
        if self.augmentation is not None and "augment_rng" in state:
            set_generator_state(self.augmentation.rng, state["augment_rng"])
        self.mark_weights_changed()

    def reset_envs(self, env_ids: Sequence[int], mode: str) -> None:
        """No per-env state (policies with env histories override this)."""

    def _obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
