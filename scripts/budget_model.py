"""What the timing loop's settings (``budget_ms``, ``min_samples``, ``max_samples``) cost on a suite, and what
they do to the A/A geomean's precision, predicted from recorded verdicts (no GPU).

    python scripts/budget_model.py VERDICT.json[.gz] [--aa AA.json[.gz] ...] [--budget-ms 150,60,30]
                                   [--min-samples 10] [--max-samples 30] [--seeds 16]
                                   [--h-scale 1.0 [--h-fixed-ms 1.25]] [--w-scale 1.0]

The model, per scenario of VERDICT (its ``phases``, medians and ``original.sparse``):

* the timing loop is replayed sample by sample with the checker's own draws (harness.draws.CallDrawer: the
  layout deck, the declared calls, the repeats, the secret whole checks) and its stopping rule
  (harness.checker.Runner._time ``more_fresh``), over ``--seeds`` seeds;
* a sample costs ``h + candidate ms + original ms (where harness.timed_samples.OriginalPlan runs it) + w (where
  harness.full_check.FullChecks checks it whole)``; ``w`` (ms, one whole-output fp32 reference with its
  comparisons) comes from the check phase: ``check_s / checked draws - candidate - original - h``; ``h`` (ms, the
  host, the launchers' round trips, the sampled rows) is the value for which the replay's mean timing equals
  the verdict's ``timing_s`` (bisection);
* the same replay under other settings gives the predicted timing phase; the rest of the wall (compile, worker
  start, check, other) is taken as measured;
* ``--h-scale X``: cheaper per-sample checks, ``h`` -> ``fixed + (h - fixed) x X`` (``--h-fixed-ms``: the launchers'
  round trips, 1.25 ms on run 63's H100), X = new / old torch operations per sample (scripts/ops_per_sample.py);
  ``--w-scale``: cheaper whole-output checks.

A/A precision (``--aa``: verdicts of the original against a byte-identical copy): per scenario, the log-ratio's
standard error is ``1.2533 x sigma / sqrt(n)`` per kernel (median of n samples; ``sigma`` = IQR / 1.349 /
median, from the verdict), ``n`` the counted samples the replay predicts under the settings (fitted on the A/A
verdict itself: both sides are the slow original there); the geomean's standard error is
``sqrt(sum se^2) / N``. The measured A/A geomeans carry a systematic part too (run 48: 0.998x, 1.000x) that
fewer samples do not change; the prediction is for the sampling part.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.buffers import DECLARED  # noqa: E402
from harness.draws import LAYOUTS, CallDrawer, repeats_of  # noqa: E402
from harness.scenarios import Scenario, load_suite  # noqa: E402
from harness.timed_samples import MIN_TIMED_LAYOUT_SAMPLES, count_counted  # noqa: E402

#: The verifier's defaults (harness.verify.VerifyOptions): draws, determinism repeats.
DRAWS, REPEATS = 2, 4


@dataclass(frozen=True)
class Settings:
    """The timing loop's settings: ``budget_ms`` (ms of loop wall), ``min_samples``, ``max_samples``."""

    budget_ms: float = 150.0
    min_samples: int = 10
    max_samples: int = 30
    #: the first repeat skips its whole check where its source passed whole (harness.full_check.FullChecks.wanted;
    #: False: every first repeat is checked whole, as in the runs before 2026-12-07)
    skip_checked_sources: bool = True


@dataclass
class Replay:
    """One replayed timing loop: its wall (ms), samples, counted samples, original calls, whole checks."""

    ms: float
    samples: int
    counted: int
    orig_calls: int
    whole: int
    skipped: int = 0  # first repeats not checked whole (their source passed whole)


def replay(sc: Scenario, seed: int, st: Settings, h_ms: float, cand_ms: float, orig_ms: float, w_ms: float,
           sparse: bool) -> Replay:
    """The timing loop of harness.checker.Runner._time replayed with a sample cost of ``h_ms`` + the calls'
    ``cand_ms`` / ``orig_ms`` (the original skipped where a ``sparse`` OriginalPlan skips it) + ``w_ms`` per whole
    check; the loop's wall clock is the sum of those costs (no WALL_MORE resampling)."""
    reps = repeats_of(sc, REPEATS)
    drawer = CallDrawer(sc, seed, draws=DRAWS, repeats=reps, min_samples=st.min_samples,
                        layouts=(DECLARED,) if sc.layout is not None else LAYOUTS, split=True)
    for i in range(drawer.checked_draws):  # the checked draws take their cards of the deck first
        drawer.checked(i)
        if st.skip_checked_sources:
            drawer.full.passed(i)  # an honest kernel passes
    keep = drawer.timed_layout
    min_keep = max(MIN_TIMED_LAYOUT_SAMPLES, st.min_samples // 2) if keep else MIN_TIMED_LAYOUT_SAMPLES
    cap = max(st.max_samples, drawer.samples_needed + reps)
    lay: list[str] = []
    counts: list[bool] = []
    ms = 0.0
    n = j = orig = whole = 0
    while True:
        counted = count_counted(lay, counts, keep)
        fresh = j == 0 and (counted < MIN_TIMED_LAYOUT_SAMPLES or (n + reps < cap and (
            n + reps < st.min_samples or drawer.pending(n) or counted < min_keep or ms < st.budget_ms)))
        if fresh:
            draw = drawer.timed(n)
        elif j < reps:
            draw, j = drawer.repeat(j, n), j + 1
        else:
            break
        wanted = drawer.full.wanted(draw)
        if wanted and st.skip_checked_sources:
            drawer.full.passed(draw.call)
        runs = (not sparse or n == 0 or wanted or (bool(drawer.declared) and not draw.ordinary)
                or (draw.counted and (keep is None or draw.layout == keep)))
        ms += h_ms + cand_ms + (orig_ms if runs else 0.0) + (w_ms if wanted else 0.0)
        orig += runs
        whole += wanted
        lay.append(draw.layout)
        counts.append(draw.counted)
        n += 1
    return Replay(ms, n, count_counted(lay, counts, keep), orig, whole, drawer.full.skipped)


def mean_replay(sc: Scenario, seeds: int, st: Settings, *args: Any) -> Replay:
    """:func:`replay` averaged over ``seeds`` seeds, their own per scenario (from its id: the scenarios of a suite
    draw apart, as the checker's per-scenario seeds do)."""
    base = zlib.crc32(sc.id.encode()) * 1000
    rs = [replay(sc, base + s, st, *args) for s in range(seeds)]
    return Replay(*(statistics.fmean(getattr(r, f) for r in rs) for f in ("ms", "samples", "counted", "orig_calls",
                                                                           "whole", "skipped")))


@dataclass
class Fit:
    """A scenario's fitted costs (ms): host per sample ``h``, whole check ``w``; its calls' medians; sparse."""

    sc: Scenario
    h: float
    w: float
    cand: float
    orig: float
    sparse: bool
    timing_s: float
    sigma: float  # per-sample log sd of the two kernels' times, root sum of squares (A/A precision)


def fit(sc: Scenario, res: dict, seeds: int, st: Settings) -> Fit:
    """Fit ``h`` (and ``w`` with it) so that the replay's mean wall equals the verdict's ``timing_s``."""
    ph, c, o = res["phases"], res["candidate"], res["original"]
    cand, orig = c["median_ms"], o["median_ms"]
    draws = DRAWS * (2 if sc.inputs is not None and any(getattr(sc.inputs, t) is not None for t in "qkv") else 1)
    per_draw = ph["check_s"] * 1e3 / draws
    sparse = bool(o.get("sparse"))
    target = ph["timing_s"] * 1e3

    def wall(h: float) -> float:
        w = max(0.0, per_draw - cand - orig - h)
        return mean_replay(sc, seeds, st, h, cand, orig, w, sparse).ms

    lo, hi = 0.0, max(1.0, target)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if wall(mid) < target else (lo, mid)
    h = (lo + hi) / 2
    sig = math.sqrt(sum((t["iqr_ms"] / 1.349 / t["median_ms"]) ** 2 for t in (c, o) if t["median_ms"] > 0))
    return Fit(sc, h, max(0.0, per_draw - cand - orig - h), cand, orig, sparse, ph["timing_s"], sig)


def rescaled(f: Fit, h_scale: float, fixed_ms: float, w_scale: float) -> Fit:
    """``f`` with its per-sample host cost ``h`` (ms) cut to ``fixed_ms + (h - fixed_ms) x h_scale`` (h itself where
    it is below ``fixed_ms``) and its whole-check cost ``w`` x ``w_scale``: the timing phase under cheaper checks. The
    checked draws (the rest of the wall) are left as measured."""
    h = f.h if f.h <= fixed_ms else fixed_ms + (f.h - fixed_ms) * h_scale
    return Fit(f.sc, h, f.w * w_scale, f.cand, f.orig, f.sparse, f.timing_s, f.sigma)


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def fits_of(verdict: dict, seeds: int, base: Settings) -> list[Fit]:
    """A fit per correct scenario of ``verdict`` (its suite loaded by name)."""
    suite = {s.id: s for s in load_suite(verdict["suite"]).scenarios}
    return [fit(suite[r["id"]], r, seeds, base) for r in verdict["scenarios"]
            if r.get("correct") and r["id"] in suite and r.get("phases")]


def predict(fits: list[Fit], seeds: int, st: Settings) -> tuple[float, list[Replay]]:
    """Predicted timing phase (s) of ``fits`` under ``st``, and each scenario's mean replay."""
    reps = [mean_replay(f.sc, seeds, st, f.h, f.cand, f.orig, f.w, f.sparse) for f in fits]
    return sum(r.ms for r in reps) / 1e3, reps


def geomean_se(fits: list[Fit], reps: list[Replay]) -> float:
    """Sampling standard error of the A/A geomean's log (a fraction: 0.001 = 0.1 %)."""
    var = sum((1.2533 * f.sigma) ** 2 / max(r.counted, 1) for f, r in zip(fits, reps, strict=True))
    return math.sqrt(var) / len(fits)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("verdict")
    ap.add_argument("--aa", action="append", default=[], help="an A/A verdict (repeatable)")
    ap.add_argument("--budget-ms", default="150,100,60,30,15")
    ap.add_argument("--min-samples", type=int, default=10)
    ap.add_argument("--max-samples", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--h-scale", type=float, default=1.0,
                    help="scale the fitted per-sample host cost h (less --h-fixed-ms) by this: fewer torch operations "
                         "per sample (scripts/ops_per_sample.py: new ops / old ops)")
    ap.add_argument("--h-fixed-ms", type=float, default=1.25,
                    help="the part of h that --h-scale leaves alone (ms): the launchers' round trips")
    ap.add_argument("--w-scale", type=float, default=1.0, help="scale the fitted whole-check cost w by this")
    ap.add_argument("--every-repeat-whole", action="store_true",
                    help="check every first repeat whole (the rule of the recorded runs)")
    a = ap.parse_args(argv)
    base = Settings(skip_checked_sources=False)  # the recorded runs checked every first repeat whole
    v = load(a.verdict)
    fits = fits_of(v, a.seeds, base)
    if a.h_scale != 1.0 or a.w_scale != 1.0:
        fits = [rescaled(f, a.h_scale, a.h_fixed_ms, a.w_scale) for f in fits]
    ph = v["phase_s"]
    rest = v["wall_s"] - ph["timing"]
    print(f"{a.verdict}: {len(fits)} scenarios, wall {v['wall_s']:.1f} s, timing {ph['timing']:.1f} s, "
          f"rest {rest:.1f} s (compile, worker start, check, other)")
    print(f"  per-sample host cost h (x {a.h_scale:g} past {a.h_fixed_ms:g} ms): median {statistics.median(f.h for f in fits):.2f} ms, "
          f"sum of whole-check costs w x 1 {sum(f.w for f in fits) / 1e3:.1f} s")
    aa = [fits_of(load(p), a.seeds, base) for p in a.aa]
    for b in [float(x) for x in a.budget_ms.split(",")]:
        st = Settings(b, a.min_samples, a.max_samples, not a.every_repeat_whole)
        t, reps = predict(fits, a.seeds, st)
        line = (f"budget {b:6.1f} ms min {st.min_samples} max {st.max_samples}: timing {t:5.1f} s, wall {rest + t:5.1f} s, "
                f"samples {sum(r.samples for r in reps):6.0f}, counted/scenario {statistics.fmean(r.counted for r in reps):4.1f}, "
                f"original calls {sum(r.orig_calls for r in reps):5.0f}, whole checks {sum(r.whole for r in reps):5.0f} "
                f"(first repeats not checked whole: {sum(r.skipped for r in reps):4.0f})")
        for k, af in enumerate(aa):
            t_aa, r_aa = predict(af, a.seeds, st)
            line += f"; A/A {k + 1}: timing {t_aa:5.1f} s, geomean SE {100 * geomean_se(af, r_aa):.3f} %"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
