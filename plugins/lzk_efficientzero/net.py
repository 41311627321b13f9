"""The EfficientZero network interface: the shared :class:`~lzk_common.blocks.LatentNet`
(representation, prediction, SSL projection) plus a recurrent step that carries the LSTM state
of the value-prefix head.

Shapes: B batch, L the latent shape (``[D]`` or ``[C, H, W]``), Hd the LSTM size, A actions,
Nv/Nr the value/value-prefix support sizes. A state is the pair (h [B, Hd], c [B, Hd]).
"""
from __future__ import annotations

import torch

from lzk_common.blocks import LatentNet

#: The LSTM state (h [B, Hd], c [B, Hd]).
State = tuple[torch.Tensor, torch.Tensor]


class EfficientZeroNet(LatentNet):
    """An EfficientZero network (implemented by the MLP and conv models). Resetting the state
    every H steps is the caller's (the unroll, the search), not the network's."""

    lstm_hidden: int

    def initial_state(self, batch: int, device: torch.device | str, dtype: torch.dtype = torch.float32) -> State:
        """The fresh state of ``batch`` rows: zeros (LightZero's ``initial_inference``)."""
        zeros = torch.zeros(batch, self.lstm_hidden, device=device, dtype=dtype)
        return zeros, zeros.clone()

    def recurrent_inference(
        self, latent: torch.Tensor, state: State, action: torch.Tensor
    ) -> tuple[torch.Tensor, State, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(latent [B, *L], state, action [B] int64) → (next_latent [B, *L], next state,
        value_prefix_logits [B, Nr], value_logits [B, Nv], policy_logits [B, A])."""
        next_latent, next_state, prefix_logits = self.dynamics(latent, state, action)
        value_logits, policy_logits = self.predict(next_latent)
        return next_latent, next_state, prefix_logits, value_logits, policy_logits

    def dynamics(self, latent: torch.Tensor, state: State, action: torch.Tensor
                 ) -> tuple[torch.Tensor, State, torch.Tensor]:  # pragma: no cover - abstract
        """(latent, state, action) → (next_latent, next state, value_prefix_logits [B, Nr])."""
        raise NotImplementedError
