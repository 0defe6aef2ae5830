"""scripts/ws_trace.py's summary of a trace build's clock64 marks, on a timeline built with known durations."""

from __future__ import annotations

import numpy as np
import pytest

from tests.script_support import load_script

wt = load_script("ws_trace")


def _timeline(n_points: int, phases: dict[str, int], rest: int, offset_wg1: int) -> np.ndarray:
    """Two consumer warpgroups whose issue points repeat the same durations; warpgroup 1 runs ``offset_wg1``
    cycles behind warpgroup 0; issue point 0 of each CTA is not traced (a tile's first S), as in the kernel."""
    marks = np.zeros((wt.CTAS, wt.WGS, wt.ITS, wt.EVENTS), dtype=np.uint64)
    period = sum(phases.values()) + rest
    for cta in range(wt.CTAS):
        for w, off in ((0, 0), (1, offset_wg1)):
            for it in range(1, n_points):
                t = 10_000 + cta * 7 + off + it * period
                marks[cta, w, it, 0] = t
                for k, ph in enumerate(wt.PHASES):
                    t += phases[ph]
                    marks[cta, w, it, k + 1] = t
    return marks


def test_the_durations_of_a_known_timeline_come_back() -> None:
    phases = {"turn": 100, "issue": 40, "s_wait": 190, "softmax": 900, "pv_wait": 340}
    marks = _timeline(60, phases, rest=230, offset_wg1=700)
    res = wt.summarize(marks, skip=4)
    period = sum(phases.values()) + 230
    assert set(res["wg"]) == {0, 1} and res["points"] == 2 * wt.CTAS * (60 - 4 - 1)
    for w in (0, 1):
        assert res["wg"][w] == {**{k: float(v) for k, v in phases.items()}, "rest": 230.0, "period": float(period)}
    # 0's issue done at entry + 140, 1's turn at entry + 700 + 100; 1 -> 0 at the next issue point
    assert res["handoff"] == {"0->1": 700.0 + 100 - 140, "1->0": float(period + 100 - (700 + 140))}


def test_a_trace_without_marks_is_refused() -> None:
    with pytest.raises(ValueError, match="ATTN_WS_TRACE=1, or a row"):
        wt.summarize(np.zeros((wt.CTAS, wt.WGS, wt.ITS, wt.EVENTS), dtype=np.uint64))
    with pytest.raises(ValueError, match="shape"):
        wt.summarize(np.zeros((2, 2), dtype=np.uint64))


def test_the_tile_boundary_of_a_known_timeline_comes_back() -> None:
    """Row tiles of 4 key tiles: issue points 1..3 traced, 500 cycles apart; from the last issue point of a tile
    to the first of the next, 1700 (the last P V, the O store, S_0 and its softmax)."""
    marks = np.zeros((wt.CTAS, wt.WGS, wt.ITS, wt.EVENTS), dtype=np.uint64)
    for cta in range(wt.CTAS):
        for w in range(2):
            t = 5_000 + 13 * cta + 211 * w
            for g in range(1, 60):
                if g % 4 == 0:
                    continue
                marks[cta, w, g, :] = t + np.arange(wt.EVENTS)
                t += 1700 if g % 4 == 3 else 500
    tb = wt.tile_boundary(marks, 4)
    assert (tb["steady"], tb["boundary"], tb["tile"]) == (500.0, 1700.0, 2 * 500.0 + 1700.0)
    assert tb["excess"] == 1700.0 - 2 * 500.0 and tb["share"] == pytest.approx(700 / 2700)
    assert tb["n_steady"] == 2 * wt.CTAS * 15 * 2 and tb["n_boundary"] == 2 * wt.CTAS * 14  # 15 tiles, the last unclosed
    with pytest.raises(ValueError, match="at least 3"):
        wt.tile_boundary(marks, 2)
    with pytest.raises(ValueError, match="wrong key-tile count"):
        wt.tile_boundary(np.zeros_like(marks), 4)


def test_the_boundary_phases_of_a_known_timeline_come_back() -> None:
    """Boundary record n (between row tiles n and n + 1, 4 key tiles each) with known gaps between its six marks;
    the next tile's issue point 1 (index 4 (n + 1) + 1) closes it. A record whose closing issue point lies beyond
    the traced ones, and a record with a missing mark, are left out."""
    marks = np.zeros((wt.CTAS, wt.WGS, wt.ITS, wt.EVENTS), dtype=np.uint64)
    bounds = np.zeros_like(marks)
    gaps = [90, 700, 400, 1200, 300]  # last_pv_turn .. s0_turn
    close = 2100  # S_0's wait and its softmax
    for cta in range(wt.CTAS):
        for w in range(2):
            for n in range(40):
                t0 = 1_000 + 10_000 * n + 37 * cta + 500 * w
                bounds[cta, w, n] = t0 + np.concatenate(([0], np.cumsum(gaps)))
                marks[cta, w, 4 * (n + 1) + 1, 0] = t0 + sum(gaps) + close + 11 * w
    bounds[0, 0, 3, 2] = 0  # an incomplete record
    res = wt.boundary_phases(bounds, marks, 4)
    assert res["n"] == 2 * wt.CTAS * 40 - 1
    assert res["wg"][0] == dict(zip(wt.BOUNDARY_PHASES, [*map(float, gaps), float(close)], strict=True))
    assert res["wg"][1]["s0_softmax"] == close + 11.0
    with pytest.raises(ValueError, match="no complete boundary record"):
        wt.boundary_phases(np.zeros_like(bounds), marks, 4)


def test_the_boundary_phases_of_an_s0first_timeline_come_back() -> None:
    """ATTN_WS_S0FIRST: the next tile is acquired and its S_0 issued before the O store (events 0 1 2 4 5 3 in
    time); each phase comes back from its own start (the store from S_0's issue, S_0's softmax from the store)."""
    marks = np.zeros((wt.CTAS, wt.WGS, wt.ITS, wt.EVENTS), dtype=np.uint64)
    bounds = np.zeros_like(marks)
    for cta in range(wt.CTAS):
        for n in range(30):
            t0 = 1_000 + 10_000 * n + 37 * cta
            e1, e2 = t0 + 90, t0 + 90 + 700
            e4 = e2 + 800  # acquire
            e5 = e4 + 300  # S_0's turn and issue
            e3 = e5 + 1500  # the store, while S_0 runs
            bounds[cta, 0, n] = [t0, e1, e2, e3, e4, e5]
            marks[cta, 0, 4 * (n + 1) + 1, 0] = e3 + 900
    res = wt.boundary_phases(bounds, marks, 4)
    assert res["s0first"] == res["n"] == wt.CTAS * 30
    assert res["wg"][0] == {"last_pv_turn": 90.0, "last_pv": 700.0, "store_o": 1500.0, "acquire": 800.0,
                            "s0_turn": 300.0, "s0_softmax": 900.0}
