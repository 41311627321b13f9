"""benchmarks/unizero_lightzero_parity.py: the export of our world model under LightZero 0.2.0's
names, which needs no LightZero. The comparison itself runs in the benchmark (rival kit's venv)."""
from __future__ import annotations

import torch

import unizero_lightzero_parity as parity
from lzk_unizero.attention import apply_rope, rope_tables
from lzk_unizero.config import UniZeroModelConfig
from lzk_unizero.model import WorldModel


def _model() -> WorldModel:
    cfg = UniZeroModelConfig(embed_dim=parity.E, num_heads=parity.H, num_layers=parity.LAYERS, final_norm="SimNorm")
    return WorldModel(cfg, (4,), parity.A, parity.N, parity.N)


def test_every_tensor_gets_one_lightzero_name() -> None:
    model = _model()
    state = model.state_dict()
    out = parity.to_lightzero(state)
    qkv = sum(1 for n in state if ".attn.qkv." in n)
    assert len(out) == len(state) + 2 * qkv  # each qkv tensor becomes query, key and value
    assert "tokenizer.encoder.fc_representation.1.running_var" in out
    assert out["transformer.blocks.1.attn.value.weight"].shape == (parity.E, parity.E)
    assert {n.split(".")[0] for n in out} == {"tokenizer", "transformer", "act_embedding_table", "head_observations",
                                             "head_rewards", "head_value", "head_policy"}


def test_the_permutation_keeps_every_rotary_attention_score() -> None:
    """Our RoPE rotates feature pairs (i, i + d/2), LightZero's (2i, 2i + 1) at the same angles: the
    exported query and key projections, rotated LightZero's way, give our scores."""
    torch.manual_seed(0)
    model = _model()
    E, H = parity.E, parity.H
    d, m = E // H, 9
    x = torch.randn(1, m, E)
    out = parity.to_lightzero(model.state_dict())
    q_ours, k_ours, _ = model.blocks[0].attn.qkv(x).split(E, dim=-1)
    cos, sin = rope_tables(m, d, 10000.0)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(1, m, H, d).transpose(1, 2)  # [1, H, m, d]

    q_rot, k_rot = (apply_rope(heads(t), cos[None], sin[None]) for t in (q_ours, k_ours))
    ours = q_rot @ k_rot.transpose(-1, -2)

    def interleaved(t: torch.Tensor) -> torch.Tensor:  # LightZero's rotation of pairs (2i, 2i + 1)
        pairs = torch.view_as_complex(t.reshape(*t.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(cos), torch.atan2(sin, cos))).flatten(-2)

    def project(name: str) -> torch.Tensor:
        w = torch.from_numpy(out[f"transformer.blocks.0.attn.{name}.weight"])
        b = torch.from_numpy(out[f"transformer.blocks.0.attn.{name}.bias"])
        return heads(x @ w.T + b)

    theirs = interleaved(project("query")) @ interleaved(project("key")).transpose(-1, -2)
    assert torch.allclose(ours, theirs, atol=1e-5)
