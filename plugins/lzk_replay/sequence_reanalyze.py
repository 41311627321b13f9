"""UniZero buffer reanalysis (SPEC §4.5 ``reanalyze_buffer``, adapted): which segments, which
roots, and the history window each root is searched from.

Selection: the candidates are the oldest ``⌊P · #live⌋`` segments (at least one). ``num_segments``
of them are drawn without replacement with probability ∝ ``exp(-(100 / #candidates) · count)``,
``count`` being how often a segment has been reanalysed, so less-reanalysed segments are favoured.
The draw uses the Gumbel-top-k trick (the k largest ``log w + Gumbel`` keys), which is exactly
successive sampling without replacement and cannot underflow for large counts the way
normalising ``exp(...)`` can.

Roots: every own position (``valid_len``) of every drawn segment, each exactly once. LightZero
searches ⌊L/K⌋ sequences of K + 1 roots per segment starting at 0, K, 2K, … (overlapping at the
sequence ends and redrawing positions past the data); covering the own positions once reaches the
same positions without duplicates or gaps (the padding copies are refreshed from the successors).

History window of a root at step c (what the acting policy feeds its root inference): the stacked
observations at steps c − M' … c and the M' actions between them, right-padded with zeros to
``W = history + 1`` observations, ``n_obs = M' + 1``, with M' = min(history, steps available).
Steps before position 0 continue into the live predecessor (the live segment whose ``succ`` is
this one, recursively when history > L); succ links never cross an episode start (the buffer
only links segments of one episode), so windows stop there, as the acting policy's history is
reset at an episode start. A trimmed predecessor also ends the window.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from lzk_replay.reanalyze import call_in_chunks
from lzk_replay.storage import SegmentStore

#: (obs [R, W, *O'] float32, actions [R, W-1] int64, n_obs [R] int64, legal [R, A] bool,
#: to_play [R] int64) -> (visit_dist [R, A] float32, root_value [R] float32)
SequenceReanalyzeFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                               tuple[np.ndarray, np.ndarray]]

COUNT_FIELD = "reanalyze_count"  # the store's extra per-slot int64 array: reanalyses of the segment
_COUNT_SCALE = 100.0  # LightZero's temperature numerator: weight exp(-(100 / #candidates) * count)


def num_candidates(num_live: int, partition: float) -> int:
    """``⌊partition · num_live⌋``, at least 1 (0 when nothing is stored). The 1e-9 keeps products
    such as 0.29 · 100 = 28.999… from flooring one short."""
    return 0 if num_live <= 0 else max(1, math.floor(partition * num_live + 1e-9))


def select_segments(store: SegmentStore, partition: float, num_segments: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Global ids [k] (sorted) of ``min(num_segments, #candidates)`` segments drawn from the
    oldest ``partition`` fraction without replacement, ∝ exp(-(100 / #candidates) · count)."""
    live = store.live_ids()
    n = num_candidates(live.shape[0], partition)
    if n == 0 or num_segments <= 0:
        return np.zeros(0, np.int64)
    cand = live[:n]  # live ids are oldest first
    count = getattr(store, COUNT_FIELD)[store.slot_of(cand)]
    keys = -(_COUNT_SCALE / n) * count + rng.gumbel(size=n)  # log-weight + Gumbel noise
    pick = np.argsort(-keys, kind="stable")[: min(num_segments, n)]
    return np.sort(cand[pick])


def predecessor_slots(store: SegmentStore) -> np.ndarray:
    """[num_slots] int64: the slot of each live segment's live predecessor, -1 where there is
    none (episode start, predecessor trimmed) and for free slots. Inverts the ``succ`` links."""
    pred = np.full(store.num_slots, -1, np.int64)
    slots = store.live_slots()
    succ = store.succ[slots]
    linked = (succ >= 0) & store.is_live(succ)
    pred[store.slot_of(succ[linked])] = slots[linked]
    return pred


def history_windows(store: SegmentStore, pred: np.ndarray, slots: np.ndarray, c: np.ndarray,
                    history: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root windows of roots ``(slots [R], c [R])`` (own positions) given ``pred`` from
    :func:`predecessor_slots`: ``(obs [R, W, *O'] float32, actions [R, W-1] int64, n_obs [R]
    int64)`` with W = history + 1 (see the module docstring; padding is 0)."""
    R, W = slots.shape[0], history + 1
    depth = -(-history // store.L)  # predecessors a window can reach back into (each adds >= 1 step)
    avail, cur = c.astype(np.int64), slots.astype(np.int64)
    for _ in range(depth):  # steps available before c, walking back along the live predecessors
        p = np.where(cur >= 0, pred[np.maximum(cur, 0)], -1)
        more = (p >= 0) & (avail < history)
        avail = avail + np.where(more, store.valid_len[np.maximum(p, 0)], 0)
        cur = np.where(more, p, -1)
    n_obs = np.minimum(avail, history) + 1
    j = np.arange(W)
    real = j < n_obs[:, None]  # [R, W] window entries holding an observation
    s_w = np.repeat(slots[:, None], W, axis=1)
    pos = c[:, None] - (n_obs[:, None] - 1) + j  # step relative to the root's segment start
    pos = np.where(real, pos, c[:, None])  # padding entries: any valid address (zeroed below)
    for _ in range(depth):  # move entries before position 0 into the predecessor
        back = pos < 0
        s_w[back] = pred[s_w[back]]  # >= 0: n_obs - 1 <= available steps
        pos[back] += store.valid_len[s_w[back]]
    obs = store.stacked_obs(s_w, pos)
    obs[~real] = 0.0
    actions = np.where(real[:, 1:], store.actions[s_w[:, :-1], pos[:, :-1]], 0)  # a between entries j, j+1
    return obs, actions.astype(np.int64), n_obs.astype(np.int64)


def reanalyze_sequence_segments(store: SegmentStore, ids: np.ndarray, reanalyze_fn: SequenceReanalyzeFn,
                                history: int, batch_size: int = 0) -> dict[str, float]:
    """Search every own position of the live segments ``ids`` once from its history window (calls
    of at most ``batch_size`` roots; 0: one call), write back visit distributions and root values,
    refresh the predecessors' padding. Returns stats ``{"roots", "segments", "calls", "refreshed",
    "window_obs_mean", "seconds"}``."""
    start = time.perf_counter()
    slots = store.slot_of(ids)
    vlen = store.valid_len[slots]
    s = np.repeat(slots, vlen)
    c = np.arange(s.shape[0]) - np.repeat(np.cumsum(vlen) - vlen, vlen)  # 0 .. valid_len - 1 per segment
    pred = predecessor_slots(store)
    window_obs = np.zeros(s.shape[0], np.int64)

    def chunk(sl: slice) -> tuple[np.ndarray, ...]:
        obs, actions, n_obs = history_windows(store, pred, s[sl], c[sl], history)
        window_obs[sl] = n_obs
        return obs, actions, n_obs, store.legal[s[sl], c[sl]], store.to_play[s[sl], c[sl]]

    visits, values, calls = call_in_chunks(reanalyze_fn, chunk, s.shape[0], batch_size, store.A)
    store.visit_dist[s, c] = visits
    store.root_values[s, c] = values
    refreshed = store.refresh_padding()
    return {"roots": float(s.shape[0]), "segments": float(ids.shape[0]), "calls": float(calls),
            "refreshed": float(refreshed), "window_obs_mean": float(window_obs.mean()) if s.size else 0.0,
            "seconds": time.perf_counter() - start}
