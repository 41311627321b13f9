"""The heartbeat protocol (lzkernel.heartbeat) and the launcher's backstop, against a fake store."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

from lzkernel.heartbeat import Heartbeat, blame, read_beats, read_fault, record_fault


class FakeStore:
    """The four ``torch.distributed.Store`` calls the protocol uses, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self.lock:
            self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def add(self, key: str, n: int) -> int:
        with self.lock:
            value = int(self.data.get(key, b"0")) + n
            self.data[key] = str(value).encode()
            return value


def _beat(seq: int, op: str | None, since: float, beat: float, where: str = "env.py:3 in step") -> dict[str, Any]:
    return {"seq": seq, "op": op, "since": since, "beat": beat, "where": where, "timeout": 20.0}


def test_blame_names_the_rank_that_did_not_arrive() -> None:
    now = 1000.0
    beats = {0: _beat(7, "all_reduce_sum", now - 20, now), 1: _beat(6, None, now - 21, now - 0.5),
             2: _beat(7, "all_reduce_sum", now - 19, now)}
    ranks, text = blame(beats, 0, 7, "all_reduce_sum", 20.0, stale_s=5.0, now=now)
    assert ranks == [1]
    assert text == ("rank 1 stopped responding: it did not reach collective #7 (all_reduce_sum), which rank 0 "
                    "waited in for 20.0 s; it has been outside collectives for 21.0 s, at env.py:3 in step")


def test_blame_of_a_frozen_a_missing_and_a_diverged_rank() -> None:
    now = 1000.0
    beats = {0: _beat(7, "barrier", now - 20, now), 1: _beat(7, "barrier", now - 30, now - 30),
             2: None, 3: _beat(9, "broadcast", now - 1, now)}
    ranks, text = blame(beats, 0, 7, "barrier", 20.0, stale_s=5.0, now=now)
    assert ranks == [1, 2, 3]
    assert text.startswith("ranks 1, 2, 3 stopped responding: rank 1: its heartbeat stopped 30 s ago")
    assert "rank 2: it never sent a heartbeat" in text
    assert "rank 3: it is in collective #9 (broadcast) while rank 0 waited in #7" in text


def test_nobody_is_blamed_when_every_rank_is_in_the_collective() -> None:
    now = 1000.0
    beats = {0: _beat(3, "barrier", now - 20, now), 1: _beat(3, "barrier", now - 20, now)}
    assert blame(beats, 0, 3, "barrier", 20.0, stale_s=5.0, now=now) == ([], "")


def test_heartbeat_publishes_and_records_the_first_verdict_only() -> None:
    store = FakeStore()
    hbs = [Heartbeat(lambda: store, r, 2, timeout_s=1.0, interval_s=0.02, prefix="p/").start() for r in range(2)]
    try:
        hbs[0].enter("all_reduce_sum")  # rank 0 waits in collective #1; rank 1 never enters it
        time.sleep(0.2)
        beats = read_beats(store, "p/", 2)
        assert beats[0]["op"] == "all_reduce_sum" and beats[0]["seq"] == 1
        assert beats[1]["op"] is None and beats[1]["seq"] == 0 and " in " in beats[1]["where"]
        ranks, text = hbs[0].diagnose("all_reduce_sum", 1, 1.0)
        assert ranks == [1] and text.startswith("rank 1 stopped responding")
        record_fault(store, "p/", {"ranks": [0], "by": 1, "message": "later"})
        assert read_fault(store, "p/") == {"ranks": [1], "by": 0, "message": text}
    finally:
        for hb in hbs:
            hb.stop()
    assert not any(t.name.startswith("lzk-heartbeat") and t.is_alive() for t in threading.enumerate())


def test_launcher_backstop_when_the_transport_deadline_never_fires() -> None:
    from lzkernel import launch

    store = FakeStore()
    now = time.time()
    store.set("p/hb/0", json.dumps({**_beat(4, "broadcast", now - 20 - launch.BACKSTOP_S - 1, now), "timeout": 20}))
    store.set("p/hb/1", json.dumps({**_beat(3, None, now - 40, now), "timeout": 20}))
    verdict = launch._backstop(store, "p/", 2)
    assert verdict is not None and verdict.startswith("rank 1 stopped responding: it did not reach collective #4")
    assert read_fault(store, "p/")["by"] == "launcher"
    store2 = FakeStore()  # within the deadline: no verdict
    store2.set("p/hb/0", json.dumps({**_beat(4, "broadcast", now - 5, now), "timeout": 20}))
    store2.set("p/hb/1", json.dumps({**_beat(3, None, now - 5, now), "timeout": 20}))
    assert launch._backstop(store2, "p/", 2) is None
