"""Timeline of the warp-specialized kernel's consumers from a trace build (GPU): where each issue point's time goes.

Build the kernel with ``-DATTN_WS_TRACE=1`` (kernels/attn_fast.cu: the leader thread of each consumer warpgroup of
CTAs 0-3 stamps six points of its first 256 issue points with the SM's ``clock64`` and stores them at the end of the
workspace), call it on one FA3-grid row, and summarize the marks:

    python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant "tr=-DATTN_WS_TRACE=1" --build-only --keep /tmp/libs
    python3 scripts/ws_trace.py /tmp/libs/tr.so --one d128_n_s8192 --json $OUT/trace.json
    python3 scripts/ws_trace.py /tmp/libs/tr.so --one d128_n_s512 --skip 0 --bn 128   # + the row tile's ends

With ``--bn`` (non-causal rows) it also prints the row tile's boundary: its cost beyond the two steady periods its
GEMMs would take in a merged pipeline, and where it goes (the trace build's boundary records: the last P V's turn and
run, the O store, the next tile's acquisition (its Q), S_0's turn, S_0 and its softmax).

Per consumer warpgroup, the median over the steady issue points (the first ``--skip`` of each CTA left out) of, in
SM cycles: ``turn`` (entry to the ping-pong turn: K's arrival and the other warpgroup's issue), ``issue`` (S and
P V issued), ``s_wait`` (S done), ``softmax``, ``pv_wait`` (P V done), ``rest`` (rescale, pack, to the next entry)
and ``period`` (entry to entry); and between the warpgroups, ``handoff`` (one's issue done to the other's turn).
The handoff means something only with the ping-pong on (ATTN_WS_PP*). The trace build also clears the trace
(147 KB) before every call. The marks perturb the schedule (ptxas keeps the softmax above the P V wait in this build: ``ATTN_WS_PVPIN``, the
same marks without stores, is the candidate that shows whether that matters); time the trace build against the
default one in the same process before reading the numbers as the default kernel's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

CTAS, WGS, ITS, EVENTS = 4, 3, 256, 6  # kTrCtas, kTrWgs, kTrIts, kTrEv of kernels/attn_fast.cu
TRACE_BYTES = 8 * 2 * CTAS * WGS * ITS * EVENTS  # the issue points' marks, then the boundaries' (kTrBoundary)
PHASES = ("turn", "issue", "s_wait", "softmax", "pv_wait")  # event k -> k + 1
# a boundary record's event k -> k + 1, and event 5 -> the next tile's issue point 1
BOUNDARY_PHASES = ("last_pv_turn", "last_pv", "store_o", "acquire", "s0_turn", "s0_softmax")


def summarize(marks: np.ndarray, skip: int = 8) -> dict:
    """``marks``: uint64 [CTAS, WGS, ITS, EVENTS] clock64 values, 0 where an issue point was not traced (beyond the
    CTA's issue points, a warpgroup the kernel does not have). Returns ``{"wg": {w: {phase: median cycles}},
    "handoff": {"w->v": median}, "points": n}`` over issue points ``skip..`` whose six marks and the next entry are
    set (``rest`` and ``period`` need the next one). Raises ValueError when no issue point qualifies."""
    if marks.shape != (CTAS, WGS, ITS, EVENTS):
        raise ValueError(f"marks must have shape {(CTAS, WGS, ITS, EVENTS)}, got {marks.shape}")
    m = marks.astype(np.int64)
    ok = (m > 0).all(axis=3)
    ok[:, :, :skip] = False
    nxt = np.zeros_like(ok)
    nxt[:, :, :-1] = ok[:, :, :-1] & (m[:, :, 1:, 0] > 0)
    out: dict = {"wg": {}, "handoff": {}, "points": int(nxt.sum())}
    if not nxt.any():
        raise ValueError("no traced issue point past the skipped ones: a library built without ATTN_WS_TRACE=1, or a "
                         "row that does not run on the warp-specialized kernel (decode, split-KV, mma fallback)")
    for w in range(WGS):
        sel = nxt[:, w]
        if not sel.any():
            continue
        d = {ph: float(np.median((m[:, w, :, k + 1] - m[:, w, :, k])[sel])) for k, ph in enumerate(PHASES)}
        d["rest"] = float(np.median((m[:, w, 1:, 0] - m[:, w, :-1, 5])[sel[:, :-1]]))
        d["period"] = float(np.median((m[:, w, 1:, 0] - m[:, w, :-1, 0])[sel[:, :-1]]))
        out["wg"][w] = d
    present = [w for w in range(WGS) if w in out["wg"]]
    for i, w in enumerate(present):  # ping-pong order: w lets present[i + 1] go
        v = present[(i + 1) % len(present)]
        if v > w:  # at the same issue point
            vals = (m[:, v, :, 1] - m[:, w, :, 2])[nxt[:, w] & nxt[:, v]]
        else:  # the last warpgroup's issue n lets the first go at issue point n + 1
            vals = (m[:, v, 1:, 1] - m[:, w, :-1, 2])[nxt[:, w, :-1] & nxt[:, v, 1:]]
        if vals.size:
            out["handoff"][f"{w}->{v}"] = float(np.median(vals))
    return out


def tile_boundary(marks: np.ndarray, key_tiles: int) -> dict:
    """Where a row tile's fixed cost goes, from the marks of a non-causal row whose row tiles all have ``key_tiles``
    key tiles (``ceil(seqlen_k / BN)``). The kernel traces issue points j = 1 .. key_tiles - 1 of each tile at
    index ``t * key_tiles + j`` of the CTA (j = 0, the tile's first S, is not traced). Returns, in SM cycles,
    ``steady`` (median entry-to-entry period inside a tile), ``boundary`` (median from the entry of a tile's last
    issue point to the entry of the next tile's first one: that issue point, then the last P V, the O store, the
    next tile's S_0 and its softmax), ``tile`` (``(key_tiles - 2) * steady + boundary``), ``excess``
    (``boundary - 2 * steady``: the boundary window holds two issue points' GEMMs, S_{n-1} with P_{n-2} V_{n-2}
    and the last P V with the next S_0, which a merged pipeline issues in two steady periods) and ``share``
    (``excess / tile``: what the tile's ends cost on top of its GEMMs' steady time); ``n_steady`` and
    ``n_boundary`` count the periods. Raises ValueError for ``key_tiles`` < 3 or when no period qualifies.
    (Session 17 read ``(boundary - steady) / tile`` as the ends' cost: one steady period too much.)"""
    if key_tiles < 3:
        raise ValueError(f"key_tiles must be at least 3 (a steady issue point inside a tile), got {key_tiles}")
    m = marks.astype(np.int64)[..., 0]  # [CTAS, WGS, ITS] entries
    steady: list[int] = []
    boundary: list[int] = []
    for e in m.reshape(-1, m.shape[-1]):
        for g in range(1, e.size - 2):
            j = g % key_tiles
            if e[g] == 0 or j == 0:
                continue
            if j < key_tiles - 1 and e[g + 1] > 0:
                steady.append(int(e[g + 1] - e[g]))
            elif j == key_tiles - 1 and e[g + 2] > 0:
                boundary.append(int(e[g + 2] - e[g]))
    if not steady or not boundary:
        raise ValueError(f"no steady or boundary period with {key_tiles} key tiles per row tile: a causal row, or the "
                         "wrong key-tile count")
    st, bd = float(np.median(steady)), float(np.median(boundary))
    tile = (key_tiles - 2) * st + bd
    return {"steady": st, "boundary": bd, "tile": tile, "excess": bd - 2 * st, "share": (bd - 2 * st) / tile,
            "n_steady": len(steady), "n_boundary": len(boundary)}


def boundary_phases(bounds: np.ndarray, marks: np.ndarray, key_tiles: int) -> dict:
    """Where a row tile's boundary goes, per consumer warpgroup, from the trace build's boundary records ``bounds``
    (uint64 [CTAS, WGS, ITS, EVENTS]: record n, between the CTA's row tiles n and n + 1, events 0 last issue point
    done, 1 last P V issued, 2 it is done, 3 O stored, 4 next tile acquired, 5 its S_0 issued) and the issue points'
    ``marks`` (the next tile's issue point 1, at index ``(n + 1) * key_tiles + 1``, closes record n). Non-causal
    rows only (every row tile has ``key_tiles`` key tiles). The events run 0 1 2 3 4 5 in time, or 0 1 2 4 5 3 in an
    ``ATTN_WS_S0FIRST`` build (the next S_0 issued before the O store): each phase is measured from the event before
    it in that record's order (``store_o`` from S_0's issue there, ``s0_softmax`` from the store). Returns ``{"wg":
    {w: {phase: median cycles}}, "n": records, "s0first": records in the S0FIRST order}`` with the phases of
    BOUNDARY_PHASES. Raises ValueError when no record is complete."""
    b = bounds.astype(np.int64)
    m = marks.astype(np.int64)[..., 0]
    out: dict = {"wg": {}, "n": 0, "s0first": 0}
    for w in range(WGS):
        rows = []
        for cta in range(CTAS):
            for n in range(ITS):
                g = (n + 1) * key_tiles + 1
                if g >= ITS or not (b[cta, w, n] > 0).all() or m[cta, w, g] == 0:
                    continue
                e, nxt = b[cta, w, n], m[cta, w, g]
                if e[3] > e[5]:  # S0FIRST: acquire and S_0 before the store
                    out["s0first"] += 1
                    rows.append([e[1] - e[0], e[2] - e[1], e[3] - e[5], e[4] - e[2], e[5] - e[4], nxt - e[3]])
                else:
                    rows.append(np.append(np.diff(e), nxt - e[5]))
        if rows:
            med = np.median(np.array(rows), axis=0)
            out["wg"][w] = {ph: float(v) for ph, v in zip(BOUNDARY_PHASES, med, strict=True)}
            out["n"] += len(rows)
    if not out["wg"]:
        raise ValueError("no complete boundary record: a library built before the boundary marks, a merged boundary, "
                         "or the wrong key-tile count")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib", type=Path, help="attn_fast built with -DATTN_WS_TRACE=1 (kernel_bench.py --build-only --keep)")
    ap.add_argument("--one", default="d128_n_s8192", help="FA3-grid row d<head_dim>_<c|n>_s<seqlen>")
    ap.add_argument("--skip", type=int, default=8, help="issue points of each CTA left out (warm-up)")
    ap.add_argument("--json", type=Path, help="write the summary and the raw marks here")
    ap.add_argument("--bn", type=int, help="the kernel's key-tile width for this row: also print the row tile's "
                    "boundary cost (non-causal rows; tile_boundary)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kernel_bench as kb  # its Runner and grid tensors (imports torch: here, not for summarize())

    torch = kb.torch
    d, c, s = args.one.split("_")
    q, k, v = kb.grid_tensors(int(d[1:]), int(s[1:]))
    call, _o, _lse, ws = kb.Runner(args.lib).prepare(q, k, v, c == "c", int(d[1:]) ** -0.5)
    if ws.numel() < TRACE_BYTES:
        raise SystemExit(f"{args.lib}: workspace of {ws.numel()} bytes holds no trace (built without ATTN_WS_TRACE=1?)")
    for _ in range(3):  # warm-up; the host clears the trace before each call
        call()
    torch.cuda.synchronize()
    start = (ws.numel() - TRACE_BYTES) & ~7
    both = ws[start:start + TRACE_BYTES].cpu().numpy().view(np.uint64).reshape(2, CTAS, WGS, ITS, EVENTS)
    raw, bounds = both[0], both[1]
    res = summarize(raw, args.skip)
    print(f"{args.one}: {res['points']} issue points")
    for w, ph in res["wg"].items():
        print(f"  warpgroup {w}: " + " ".join(f"{k} {v:.0f}" for k, v in ph.items()))
    print("  handoff (issue done -> the other's turn): " + " ".join(f"{k} {v:.0f}" for k, v in res["handoff"].items()))
    if args.bn:
        if c == "c":
            raise SystemExit("--bn: causal row tiles have different key-tile counts; use a non-causal row")
        key_tiles = -(-int(s[1:]) // args.bn)
        tb = tile_boundary(raw, key_tiles)
        res["tile_boundary"] = tb
        print(f"  row tile: steady {tb['steady']:.0f}, boundary {tb['boundary']:.0f}, tile {tb['tile']:.0f} cycles: "
              f"the ends cost {tb['excess']:.0f} beyond two steady periods, {tb['share']:.1%} of the tile")
        bp = boundary_phases(bounds, raw, key_tiles)
        res["boundary_phases"] = bp
        for w, ph in bp["wg"].items():
            print(f"  boundary, warpgroup {w}: " + " ".join(f"{k} {v:.0f}" for k, v in ph.items()))
    if args.json:
        args.json.write_text(json.dumps({**res, "row": args.one, "marks": raw.tolist(), "bounds": bounds.tolist()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
