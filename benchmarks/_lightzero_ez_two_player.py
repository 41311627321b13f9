"""LightZero's side of ``lightzero_ez_parity.py`` (runs under the rival kit's Python, ``$LZ_PY``),
and the deterministic fake network both sides search with (importable without LightZero).

    $LZ_PY benchmarks/_lightzero_ez_two_player.py IN.npz OUT.npz

The fake network is a function of the root's seed and the action path from the root, so no model
has to match: per node, a uniform stream (splitmix64 of the seed and the path) gives the edge's
reward increment r ∈ [−reward_scale, reward_scale], the value v ∈ [−1, 1] and the policy logits
∈ [−2, 2]; the value prefix behaves like an LSTM that accumulates r: the model's state is the
running prefix, ``prefix = float32(state) + float32(r)`` and the output state is the prefix. The
search drivers zero that state where they reset (LightZero's ``is_reset``, ours ``fresh``), so
prefixes depend on the reset rule exactly as a trained LSTM's would.

IN holds ``logits`` [B, A] f32 (the roots', from ``root_logits``), ``legal`` [B, A] bool,
``to_play`` [B] int64 (1/2, or -1 for all rows), ``seeds`` [B] uint64, ``configs`` [K, 3] f64
(lstm_horizon_len, discount, simulations) and ``reward_scale`` []. Runs LightZero 0.2.0's own
``EfficientZeroMCTSCtree.search`` (its Python loop and hidden-state resets, its C++ tree
``ctree_efficientzero``) without root noise for every config, with the fake network as the model
(scalars instead of support logits: the inverse transform is the identity). OUT: per config k
``visits_<k>`` [B, A] (0 on illegal actions) and ``values_<k>`` [B].

Ties: the tree draws among tied actions with C ``rand()`` reseeded from the wall clock, and every
first descent below a new node is an exact tie (no child visited, N = 0). Unless
``LZK_RANDOM_TIES=1``, the driver re-executes itself with a preloaded shim (compiled with ``cc``)
whose ``rand()`` returns 0, so LightZero takes the first of the tied actions, as our deterministic
search does.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

MASK64 = (1 << 64) - 1


def _mix(z: int) -> int:
    """One splitmix64 step."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _uniforms(seed: int, path: tuple, k: int) -> list:
    """``k`` uniforms in [0, 1) for the node at ``path`` (actions from the root) of root ``seed``."""
    z = _mix(int(seed) & MASK64)
    for a in path:
        z = _mix(z ^ (int(a) + 1))
    out = []
    for _ in range(k):
        z = _mix(z)
        out.append((z >> 11) * 2.0 ** -53)
    return out


def root_logits(seed: int, num_actions: int) -> np.ndarray:
    """The fake network's policy logits [A] f32 at a root."""
    u = _uniforms(seed, (), num_actions)
    return np.asarray([4.0 * x - 2.0 for x in u], np.float32)


def fake_step(seed: int, path: tuple, parent_state: float, num_actions: int, reward_scale: float
              ) -> tuple:
    """The node at ``path`` (its last action the edge's): (prefix f32, value f32, logits [A] f32)
    from the parent's LSTM state (the running prefix, 0 where the search reset it)."""
    u = _uniforms(seed, path, 2 + num_actions)
    r = np.float32(reward_scale * (2.0 * u[0] - 1.0))
    prefix = np.float32(np.float32(parent_state) + r)
    value = np.float32(2.0 * u[1] - 1.0)
    logits = np.asarray([4.0 * x - 2.0 for x in u[2:]], np.float32)
    return prefix, value, logits


class PathRegistry:
    """Node ids ↔ (root row, action path): the fake network's latent is a node id."""

    def __init__(self, num_roots: int) -> None:
        self.nodes = [(b, ()) for b in range(num_roots)]  # ids 0 … B−1: the roots

    def child(self, node_id: int, action: int) -> tuple:
        b, path = self.nodes[node_id]
        self.nodes.append((b, path + (int(action),)))
        return len(self.nodes) - 1, b, path + (int(action),)


# ----------------------------------------------------------------------------------------------
# LightZero's side (imports lzero only here)
# ----------------------------------------------------------------------------------------------

_SHIM = "int rand(void) { return 0; }\nvoid srand(unsigned int seed) { (void)seed; }\n"


def fake_children(registry: PathRegistry, seeds: np.ndarray, ids: list, actions: list, parent_state: np.ndarray,
                  num_actions: int, reward_scale: float) -> tuple[list, list, list, list]:
    """One batched model step of the fake network: for node ids [n] and actions [n], the
    children's ids, value prefixes, values and logits (both sides' ``recurrent_inference``)."""
    new_ids, prefixes, values, logits = [], [], [], []
    for i, (nid, a) in enumerate(zip(ids, actions)):
        cid, b, path = registry.child(nid, a)
        p, v, lg = fake_step(int(seeds[b]), path, float(parent_state[i]), num_actions, reward_scale)
        new_ids.append(cid)
        prefixes.append(p)
        values.append(v)
        logits.append(lg)
    return new_ids, prefixes, values, logits


def _reexec_with_first_tie() -> None:
    """Re-execute this script with ``rand()`` ≡ 0 preloaded (once: LZK_SHIM_LOADED marks it)."""
    if os.environ.get("LZK_RANDOM_TIES") == "1" or os.environ.get("LZK_SHIM_LOADED") == "1":
        return
    tmp = tempfile.mkdtemp(prefix="lzk_rand_shim_")
    src, lib = os.path.join(tmp, "shim.c"), os.path.join(tmp, "shim.so")
    with open(src, "w") as f:
        f.write(_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, src], check=True)
    env = dict(os.environ, LZK_SHIM_LOADED="1",
               LD_PRELOAD=(lib + " " + os.environ.get("LD_PRELOAD", "")).strip())
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


class FakeLightZeroModel:
    """LightZero's ``recurrent_inference`` interface over the fake network."""

    def __init__(self, seeds: np.ndarray, num_actions: int, reward_scale: float) -> None:
        self.seeds, self.A, self.scale = seeds, num_actions, reward_scale
        self.registry = PathRegistry(len(seeds))

    def eval(self) -> "FakeLightZeroModel":
        return self

    def recurrent_inference(self, latent, state, actions):
        import torch
        from easydict import EasyDict

        ids = latent[:, 0].numpy().astype(np.int64).tolist()
        parent_state = state[0][0, :, 0].numpy()  # LightZero passes (c, h) [1, n, 1]; both hold the prefix
        new_ids, prefixes, values, logits = fake_children(self.registry, self.seeds, ids, actions.numpy().tolist(),
                                                          parent_state, self.A, self.scale)
        prefix = torch.from_numpy(np.asarray(prefixes, np.float32)[:, None])
        hidden = prefix.reshape(1, -1, 1).clone()
        return EasyDict(latent_state=torch.tensor(new_ids, dtype=torch.float64)[:, None],
                        value_prefix=prefix, value=torch.from_numpy(np.asarray(values, np.float32)[:, None]),
                        policy_logits=torch.from_numpy(np.stack(logits)),
                        reward_hidden_state=(hidden, hidden.clone()))


def main(src: str, dst: str) -> None:
    _reexec_with_first_tie()
    from easydict import EasyDict
    from lzero.mcts.tree_search.mcts_ctree import EfficientZeroMCTSCtree

    data = np.load(src)
    logits, legal, to_play, seeds = data["logits"], data["legal"], data["to_play"], data["seeds"]
    B, A = logits.shape
    scale = float(data["reward_scale"])
    out = {}
    for k, (horizon, discount, sims) in enumerate(data["configs"].tolist()):
        cfg = EasyDict(dict(num_simulations=int(sims), lstm_horizon_len=int(horizon), discount_factor=float(discount),
                            env_type="board_games" if (to_play != -1).any() else "not_board_games",
                            device="cpu", model=EasyDict(support_scale=300, categorical_distribution=True)))
        mcts = EfficientZeroMCTSCtree(cfg)
        mcts.inverse_scalar_transform_handle = lambda x: x  # the fake network outputs scalars
        model = FakeLightZeroModel(seeds, A, scale)
        legal_lists = [np.flatnonzero(legal[b]).tolist() for b in range(B)]
        roots = EfficientZeroMCTSCtree.roots(B, legal_lists)
        tp = [int(t) for t in to_play]
        roots.prepare_no_noise([0.0] * B, logits.astype(np.float32).tolist(), tp)
        zero = np.zeros((1, B, 1), np.float32)
        mcts.search(roots, model, np.arange(B, dtype=np.float64)[:, None], (zero, zero.copy()), tp)
        visits = np.zeros((B, A), np.float64)
        for b, dist in enumerate(roots.get_distributions()):
            visits[b, legal_lists[b]] = dist
        out[f"visits_{k}"] = visits
        out[f"values_{k}"] = np.asarray(roots.get_values(), np.float64)
    out["first_tie_shim"] = np.asarray(os.environ.get("LZK_SHIM_LOADED") == "1")
    np.savez(dst, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
