"""evtsync.core.memo.BoundedMemo: computed once per key, the least recently used dropped beyond its
size, every caller handed its own copy, safe from several threads (counts written by hand here)."""

from __future__ import annotations

import threading

import pytest

from evtsync.core.memo import BoundedMemo


def test_computed_once_per_key_and_the_least_recently_used_dropped() -> None:
    calls: list[str] = []
    memo: BoundedMemo[list[str]] = BoundedMemo(2, list)

    def compute(key: str):
        return lambda: calls.append(key) or [key]

    assert memo.get("a", compute("a")) == ["a"]
    assert memo.get("b", compute("b")) == ["b"]
    assert memo.get("a", compute("a")) == ["a"]  # kept: not computed again, now the most recent
    memo.get("c", compute("c"))  # beyond 2: "b", the least recently used, is dropped
    memo.get("a", compute("a"))
    memo.get("b", compute("b"))
    assert calls == ["a", "b", "c", "b"] and len(memo) == 2
    memo.clear()
    memo.get("a", compute("a"))
    assert calls[-1] == "a" and len(memo) == 1


def test_each_caller_gets_a_copy() -> None:
    memo: BoundedMemo[list[int]] = BoundedMemo(4, list)
    first = memo.get("k", lambda: [1, 2])
    first.append(3)  # a caller's change does not reach the memo
    assert memo.get("k", lambda: [9]) == [1, 2]


def test_a_failed_computation_keeps_nothing() -> None:
    memo: BoundedMemo[int] = BoundedMemo(2, int)

    def fail() -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        memo.get("k", fail)
    assert len(memo) == 0 and memo.get("k", lambda: 5) == 5


def test_threads_share_it_without_losing_entries_or_exceeding_its_size() -> None:
    memo: BoundedMemo[int] = BoundedMemo(3, int)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(2000):
                key = (t + i) % 5
                assert memo.get(key, lambda key=key: key * 10) == key * 10
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(memo) <= 3


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedMemo(0, int)
