"""The cross-partition key index sorts fingerprints and merges its sorted runs, a key's newest
entry winning, also when two keys share the high half of their fingerprint (both halves then
order them)."""

from __future__ import annotations

import numpy as np

from changelake.table.write.assigners.key_index import KeyIndex, fingerprint_order

U = np.uint64


def test_runs_merge_with_the_newest_entry_winning() -> None:
    index = KeyIndex(memory_budget=1 << 30, ttl_ms=None)
    index.put(np.array([5, 1, 3], dtype=U), np.array([50, 10, 30], dtype=U), np.array([0, 1, 2]), 0)
    index.put(np.array([3, 2], dtype=U), np.array([30, 20], dtype=U), np.array([7, 8]), 0)
    assert len(index.runs) == 1  # the second run was much smaller: merged into the first
    assert index.runs[0].hi.tolist() == [1, 2, 3, 5]
    hi, lo = np.array([1, 2, 3, 5, 4], dtype=U), np.array([10, 20, 30, 50, 40], dtype=U)
    assert index.lookup(hi, lo, 0).tolist() == [1, 8, 7, 0, -1]


def test_keys_sharing_a_high_half_stay_apart() -> None:
    index = KeyIndex(memory_budget=1 << 30, ttl_ms=None)
    # (9, 1) and (9, 2) share the high half 9; (9, 1) is written again in the second run, so a
    # merge by the high half alone would leave its two entries apart, both kept
    index.put(np.array([9, 9, 4], dtype=U), np.array([2, 1, 4], dtype=U), np.array([0, 1, 2]), 0)
    index.put(np.array([9], dtype=U), np.array([1], dtype=U), np.array([5]), 0)
    run = index.runs[-1]
    assert list(zip(run.hi.tolist(), run.lo.tolist(), strict=True)) == [(4, 4), (9, 1), (9, 2)]
    hi, lo = np.array([9, 9, 4, 9], dtype=U), np.array([2, 1, 4, 3], dtype=U)
    assert index.lookup(hi, lo, 0).tolist() == [0, 5, 2, -1]


def test_fingerprints_sort_by_both_halves_when_high_halves_collide() -> None:
    hi, lo = np.array([7, 3, 7, 1, 7], dtype=U), np.array([9, 0, 2, 5, 9], dtype=U)
    order = fingerprint_order(hi, lo)
    assert list(zip(hi[order].tolist(), lo[order].tolist(), strict=True)) == [(1, 5), (3, 0), (7, 2), (7, 9), (7, 9)]
    distinct = fingerprint_order(np.array([4, 2, 8], dtype=U), np.array([0, 0, 0], dtype=U))
    assert distinct.tolist() == [1, 0, 2]


def test_a_stable_order_keeps_equal_fingerprints_in_their_order() -> None:
    hi, lo = np.array([7, 3, 7, 7, 3], dtype=U), np.array([9, 0, 9, 9, 0], dtype=U)
    assert fingerprint_order(hi, lo, stable=True).tolist() == [1, 4, 0, 2, 3]
    hi[2], lo[2] = 7, 1  # (7, 1) shares its high half with (7, 9): both halves order them
    assert fingerprint_order(hi, lo, stable=True).tolist() == [1, 4, 2, 0, 3]


def test_long_runs_filter_lookups_and_find_every_key_in_memory_and_on_disk() -> None:
    # Runs past 65,536 entries get a membership filter, kept when the run goes to disk; keys
    # held (the newest value of each), keys not held, and keys that share a high half are found.
    rng = np.random.default_rng(5)
    hi = rng.integers(0, 2**64 - 1, 300_000, dtype=U)
    lo = rng.integers(0, 2**64 - 1, 300_000, dtype=U)
    hi[1], lo[1] = hi[0], lo[0] ^ U(1)  # one high half shared by two keys
    model: dict[tuple[int, int], int] = {}
    for budget in (1 << 30, 1 << 20):  # all in memory, then spilled
        index = KeyIndex(memory_budget=budget, ttl_ms=None)
        for start in range(0, 300_000, 50_000):  # each write also rewrites keys of the last one
            part = slice(max(0, start - 10_000), start + 50_000)
            values = np.arange(part.start, part.stop) + start
            index.put(hi[part], lo[part], values, 0)
            model.update(zip(zip(hi[part].tolist(), lo[part].tolist(), strict=True), values.tolist(), strict=True))
        assert any(r.bits is not None for r in index.runs)
        assert (budget < 1 << 30) == any(r.on_disk for r in index.runs)
        new_hi = rng.integers(0, 2**64 - 1, 50_000, dtype=U)
        new_lo = rng.integers(0, 2**64 - 1, 50_000, dtype=U)
        asked_hi, asked_lo = np.concatenate([hi, new_hi, hi[:1]]), np.concatenate([lo, new_lo, lo[:1] ^ U(2)])
        expected = [model.get(k, -1) for k in zip(asked_hi.tolist(), asked_lo.tolist(), strict=True)]
        assert index.lookup(asked_hi, asked_lo, 0).tolist() == expected
