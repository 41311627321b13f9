"""The learners' optimizers: Adam and AdamW on torch's fused kernels, without ``torch.optim``'s
start-up cost; SGD from ``torch.optim``.

Every public method of ``torch.optim.Optimizer`` (the constructor, ``step``, ``zero_grad``,
``state_dict``) imports ``torch._dynamo`` on first use: 1.1 s of each run's start on a 2-core
EPYC, 1% of ReZero CartPole's time to solve, spent before the first collect. :class:`FusedAdam`
calls the very kernels ``torch.optim.Adam(fused=True)`` calls (``torch._fused_adam_``, or
``torch._fused_adamw_`` for decoupled decay) on the same state, so its updates equal torch's bit
for bit, and its state dict has torch's layout, so checkpoints move between the two either way
(``tests/muzero/test_fused_adam.py`` proves both).

Only what the learners use is offered: no amsgrad, maximize, closures, gradient scaling or hooks.
Where torch has no fused kernel for the parameters' device (not CPU or CUDA) the factories
return ``torch.optim``'s own (foreach or for-loop) implementation.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol

import torch
from torch import nn

#: Devices with fused Adam/AdamW/SGD kernels in torch.
FUSED_DEVICES = ("cpu", "cuda")

ParamGroups = Iterable[nn.Parameter] | Iterable[dict[str, Any]]


class Optimizer(Protocol):
    """What a learner needs of an optimizer (a subset of ``torch.optim.Optimizer``)."""

    param_groups: list[dict[str, Any]]

    def step(self) -> Any: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class FusedAdam:
    """Adam (L2 decay added to the gradient) or, with ``decoupled_weight_decay``, AdamW, one fused
    kernel call per (device, dtype) group of parameters per step.

    ``params``: parameters, or groups ``{"params": [...], <option>: value}`` overriding ``lr``,
    ``betas``, ``eps`` or ``weight_decay``. ``state[p]`` holds ``step`` (a float32 scalar on
    ``p``'s device, as torch's fused Adam keeps it), ``exp_avg`` and ``exp_avg_sq``.
    """

    def __init__(self, params: ParamGroups, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled_weight_decay: bool = False) -> None:
        # The keys of torch's Adam groups, so that state dicts match key for key.
        self.defaults: dict[str, Any] = {
            "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": False,
            "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": True,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        groups = list(params)
        if not groups:
            raise ValueError("FusedAdam got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups: list[dict[str, Any]] = []
        for g in groups:
            group = {**self.defaults, **{k: v for k, v in g.items() if k != "params"}, "params": list(g["params"])}
            for p in group["params"]:
                if p.device.type not in FUSED_DEVICES or not p.is_floating_point():
                    raise ValueError(f"FusedAdam: no fused kernel for a {p.dtype} parameter on {p.device}")
            self.param_groups.append(group)
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (torch's order: steps += 1, then
        the kernel, which reads the incremented step for the bias corrections)."""
        for group in self.param_groups:
            by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise RuntimeError("FusedAdam does not support sparse gradients")
                    by_kind.setdefault((p.device, p.dtype), []).append(p)
            beta1, beta2 = group["betas"]
            kernel = torch._fused_adamw_ if group["decoupled_weight_decay"] else torch._fused_adam_
            for params in by_kind.values():
                states = [self._state_of(p) for p in params]
                steps = [s["step"] for s in states]
                torch._foreach_add_(steps, 1)
                kernel(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                       [s["exp_avg_sq"] for s in states], [], steps, amsgrad=False, lr=float(group["lr"]),
                       beta1=float(beta1), beta2=float(beta2), weight_decay=float(group["weight_decay"]),
                       eps=float(group["eps"]), maximize=False, grad_scale=None, found_inf=None)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().requires_grad_(False)
                    p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: parameters numbered across groups in order; ``state`` keyed by those
        numbers (parameters that have stepped), ``param_groups`` with the numbers as ``params``.
        Tensors are the live state (as torch's): serialise or copy before the next step."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                ids.append(index.setdefault(id(p), len(index)))
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of this class or of ``torch.optim.Adam``/``AdamW``: same number of
        groups and of parameters per group; the group options are the saved ones; moments are
        copied to each parameter's device and dtype, ``step`` to a float32 scalar on it."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"optimizer state has {len(saved_groups)} parameter groups, "
                             f"this optimizer {len(self.param_groups)}")
        by_index: dict[int, torch.Tensor] = {}
        new_groups = []
        for saved, group in zip(saved_groups, self.param_groups):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"optimizer state has a group of {len(saved['params'])} parameters "
                                 f"where this optimizer has {len(group['params'])}")
            by_index.update(zip(saved["params"], group["params"]))
            options = {k: v for k, v in saved.items() if k != "params" and k in self.defaults}
            options["betas"] = tuple(options.get("betas", group["betas"]))
            new_groups.append({**group, **options, "params": group["params"]})
        new_state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for i, s in state_dict["state"].items():
            p = by_index[int(i)]
            new_state[p] = {
                "step": torch.as_tensor(s["step"]).to(device=p.device, dtype=torch.float32, copy=True).reshape(()),
                "exp_avg": s["exp_avg"].to(device=p.device, dtype=p.dtype, copy=True),
                "exp_avg_sq": s["exp_avg_sq"].to(device=p.device, dtype=p.dtype, copy=True),
            }
        self.param_groups, self.state = new_groups, new_state


def _device_type(params: list[Any]) -> str:
    first = params[0]["params"][0] if isinstance(params[0], dict) else params[0]
    return first.device.type


def adam(params: ParamGroups, lr: float, *, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
         decoupled_weight_decay: bool = False) -> Optimizer:
    """Adam (or AdamW with ``decoupled_weight_decay``): :class:`FusedAdam` where torch has the fused
    kernels for the parameters' device, else ``torch.optim``'s implementation."""
    params = list(params)
    if _device_type(params) in FUSED_DEVICES:
        return FusedAdam(params, lr, betas=betas, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay)
    cls = torch.optim.AdamW if decoupled_weight_decay else torch.optim.Adam
    return cls(params, lr=lr, betas=betas, weight_decay=weight_decay)


def sgd(params: ParamGroups, lr: float, *, weight_decay: float = 0.0, momentum: float = 0.9) -> Optimizer:
    """SGD with momentum and L2 decay, fused where torch has the kernel for the device."""
    params = list(params)
    fused = {"fused": True} if _device_type(params) in FUSED_DEVICES else {}
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **fused)


def decay_groups(params: Iterable[nn.Parameter], decayed: set[int], weight_decay: float) -> list[dict[str, Any]]:
    """Two groups of ``params``: those whose id is in ``decayed`` with ``weight_decay``, the rest
    without decay (order kept within each)."""
    params = list(params)
    return [{"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0}]
