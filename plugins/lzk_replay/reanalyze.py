"""ReZero whole-buffer reanalysis with the backward view (SPEC §3.1, without its coverage gaps).

Each selected segment is a chunk. Group g holds position ``c = valid_len - 1 - g`` of every
selected segment with ``valid_len > g``, so group 0 is every segment's last own position and the
walk runs backwards in time. A group is searched together (split into calls of at most
``batch_size`` roots). Roots of group g >= 1 reuse the searched root value of c + 1 (group g - 1,
same segment) with the true action a_c; group 0 has no searched successor (true action -1 and
``reuse_value=None``). With ``chain`` = C >= 1 the reuse chain restarts every C positions of a
segment: position c reuses c + 1 only when c + 1 is not a multiple of C (LightZero's reanalysis
searches chunks of C = N // 2000 consecutive positions, reuse inside a chunk only; SPEC §3.1).
Only a segment's own positions are searched, each exactly once; the padding copies are
refreshed from the successors afterwards.

Write-back: visit distributions and root values (ReZero-MZ writes both).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from lzk_replay.storage import SegmentStore
from lzkernel import progressed

#: (obs [R, *O'], legal [R, A], to_play [R], true_action [R] (-1 none), reuse_value [R] | None)
#: -> (visit_dist [R, A] float32, root_value [R] float32)
ReanalyzeFn = Callable[..., tuple[np.ndarray, np.ndarray]]


def select_round_robin(store: SegmentStore, cursor: int, max_roots: int) -> tuple[np.ndarray, int]:
    """Whole segments from global id ``cursor`` on (wrapping to the oldest), until their
    transitions would exceed ``max_roots`` (0: no cap; at least one segment is taken).

    Returns ``(ids [n] int64, next cursor)``. Successive capped calls therefore cycle through the
    buffer and every stored transition is reanalysed once per cycle.
    """
    if store.next_id == store.base_id:
        return np.zeros(0, np.int64), store.base_id
    cursor = min(max(cursor, store.base_id), store.next_id)
    ids = np.concatenate([np.arange(cursor, store.next_id), np.arange(store.base_id, cursor)]).astype(np.int64)
    if max_roots <= 0:
        return ids, store.next_id
    counts = np.cumsum(store.valid_len[store.slot_of(ids)])
    take = max(1, int(np.searchsorted(counts, max_roots, side="right")))
    ids = ids[:take]
    nxt = int(ids[-1]) + 1
    return ids, (store.base_id if nxt >= store.next_id else nxt)


def call_in_chunks(fn: Callable[..., tuple[np.ndarray, np.ndarray]], make_args: Callable[[slice], Sequence[Any]],
                   rows: int, batch_size: int, num_actions: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``fn(*make_args(chunk))`` over row chunks of at most ``batch_size`` of ``rows`` (0: one
    call); arguments are built per chunk so that large inputs (history windows) never exist for
    all rows at once. Returns ``(visit_dist [rows, A] float32, root_value [rows] float32, calls)``."""
    visits = np.empty((rows, num_actions), np.float32)
    values = np.empty(rows, np.float32)
    step = batch_size if batch_size > 0 else max(rows, 1)
    calls = 0
    for lo in range(0, rows, step):
        sl = slice(lo, min(lo + step, rows))
        vd, rv = fn(*make_args(sl))
        progressed()  # a whole-buffer reanalysis is long: each search call is progress (lzkernel.watchdog)
        visits[sl], values[sl] = vd, np.asarray(rv, np.float32).reshape(-1)
        calls += 1
    return visits, values, calls


def reanalyze_segments(store: SegmentStore, ids: np.ndarray, reanalyze_fn: ReanalyzeFn,
                       batch_size: int = 0, chain: int = 0) -> dict[str, float]:
    """Search every own position of the live segments ``ids`` backwards and write back (reuse
    chains of ``chain`` positions at most; 0: the whole segment); returns stats ``{"roots",
    "groups", "calls", "segments", "refreshed", "seconds"}``."""
    start = time.perf_counter()
    slots = store.slot_of(ids)
    vlen = store.valid_len[slots]
    succ_value = np.zeros(slots.shape[0], np.float32)  # searched value of c + 1, per segment
    roots = calls = 0
    groups = int(vlen.max()) if vlen.size else 0
    for g in range(groups):
        rows = np.nonzero(vlen > g)[0]
        s, c = slots[rows], vlen[rows] - 1 - g
        obs, legal, to_play = store.stacked_obs(s, c), store.legal[s, c], store.to_play[s, c]
        true_action = store.actions[s, c] if g > 0 else np.full(rows.shape[0], -1, np.int64)
        if g > 0 and chain > 0:  # c + 1 starts the next chain: search c afresh
            true_action = np.where((c + 1) % chain == 0, -1, true_action)
        reuse = succ_value[rows] if g > 0 else None
        visits, values, n_calls = call_in_chunks(
            reanalyze_fn,
            lambda sl: (obs[sl], legal[sl], to_play[sl], true_action[sl], None if reuse is None else reuse[sl]),
            rows.shape[0], batch_size, store.A)
        calls += n_calls
        store.visit_dist[s, c] = visits
        store.root_values[s, c] = values
        succ_value[rows] = values
        roots += rows.shape[0]
    refreshed = store.refresh_padding()
    return {"roots": float(roots), "groups": float(groups), "calls": float(calls),
            "segments": float(ids.shape[0]), "refreshed": float(refreshed),
            "seconds": time.perf_counter() - start}
