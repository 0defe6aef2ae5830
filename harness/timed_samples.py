"""Which timed samples a time is over, their statistics, and which samples the original runs on.

The checker's timing loop (harness/checker.py ``Runner._time``) takes samples of several kinds: fresh
counted calls of the timed layout (the only ones a time is over), fresh calls of the other drawn layouts,
calls on a scenario's declared values and determinism repeats (never counted: harness/draws.py). Every
sample is checked; only the counted ones are timed in the verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from harness.verdict import TimingStats

#: Fewest samples of the timed layout a median is taken over; with fewer, every counted sample counts.
MIN_TIMED_LAYOUT_SAMPLES = 3
#: When the samples would convict on the host wall clock alone (harness.timing_escape.escape_evidence), the
#: loop takes this many times its fresh calls more (at least ``min_samples`` each, at most the cap) before it judges, once: a
#: wake-up burst in 3 of 5 samples convicted an honest 7 us kernel in run 42 (2026-12-06, H100); work that
#: outlives the end event does so on every call and stays convicted.
WALL_MORE = 2
#: An anchor time's layout label on a sample that is never counted (a repeat or a declared call).
UNCOUNTED = "uncounted"
#: The median event time (ms) of the original's timed calls from which it runs only where needed (:class:`OriginalPlan`).
ORIGINAL_SPARSE_MS = 1.0


def timed_selection(layouts: list[str], counted: list[bool], keep: str | None) -> tuple[list[int], str | None]:
    """Indices of the samples a time (and the stream_timing check) is over, and their layout label: the
    counted samples (CallDraw.counted: no determinism repeat, whose values a cache can replay without the
    work, no call on a scenario's declared values, which can give the answer away) whose layout is ``keep``
    (every layout when None) when there are at least :data:`MIN_TIMED_LAYOUT_SAMPLES` of them; else every
    counted sample (label None); else every sample."""
    sel = [i for i, (lay, f) in enumerate(zip(layouts, counted, strict=True)) if counts(lay, f, keep)]
    if len(sel) >= MIN_TIMED_LAYOUT_SAMPLES:
        return sel, keep
    return [i for i, f in enumerate(counted) if f] or list(range(len(layouts))), None


def counts(layout: str, counted: bool, keep: str | None) -> bool:
    """A sample counts in a time: counted (no repeat, no declared call) and of layout ``keep`` (any when None)."""
    return counted and (keep is None or layout == keep)


def count_counted(layouts: list[str], counted: list[bool], keep: str | None) -> int:
    """Samples that count (:func:`counts`): what the timing loop's floor counts."""
    return sum(counts(lay, f, keep) for lay, f in zip(layouts, counted, strict=True))


def timing_stats(times: list[float], label: str | None = None) -> TimingStats:
    """Median and IQR of ``times`` (ms; the samples :func:`timed_selection` chose), ``label`` their layout.
    Raises ValueError when ``times`` is empty or holds a NaN (a sample without that kernel's call)."""
    if not times or any(math.isnan(t) for t in times):
        raise ValueError(f"timing statistics over {len(times)} samples, some without a time: {times}")
    qs = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return TimingStats(median_ms=statistics.median(times), iqr_ms=qs[2] - qs[0], samples=len(times), layout=label)


@dataclass
class OriginalPlan:
    """Whether the original kernel runs in a timed sample.

    The original's outputs serve a timed sample's checks (whole output within a loose bound of the
    original's, lse +inf on the original's rows, 2 x the original's error on the sampled rows) and its
    time serves the speedup, which is over the counted samples of the timed layout only. On `full`'s long
    scenarios the original (~10x slower than a fast candidate) took 94 % of the timed GPU time (run 52,
    docs/gpu-results.md), most of it on samples no time is over. So once the median of its timed calls so far
    is ``sparse_ms`` or more, the original runs only where its output or time is used: on samples that
    :func:`counts` (the timed layout's fresh counted calls), on the calls checked whole against the fp32
    reference (harness.full_check.FullChecks: their tolerance is 2 x the original's error) and on calls with
    a scenario's declared values (extreme values can make a row that sees keys empty: only the original
    says which). The others (the other layouts' fresh calls on ordinary values, the determinism repeats but
    the first) are checked without it: the sampled rows against the fp32 reference under the checked draws'
    tolerance (never looser than with the original), lse +inf and o 0 exactly on the rows that see no key
    (harness.scenarios.no_key_rows), o and lse finite elsewhere, a repeat's bits against its source's.
    ``sparse_ms`` 0: the original runs in every sample.
    """

    sparse_ms: float = ORIGINAL_SPARSE_MS
    #: the event times (ms) of the original's timed calls so far
    times_ms: list[float] = field(default_factory=list)

    @property
    def sparse(self) -> bool:
        """Whether the original runs only where used: the median of its timed calls so far is ``sparse_ms`` or
        more (one slow call, e.g. the first, does not decide it)."""
        return 0 < self.sparse_ms <= (statistics.median(self.times_ms) if self.times_ms else 0.0)

    def runs(self, layout: str, counted: bool, keep: str | None, checked_whole: bool,
             declared_values: bool = False) -> bool:
        """Whether the original runs in the sample of ``layout`` (``counted``: CallDraw.counted; ``keep``:
        the timed layout, None for every layout; ``checked_whole``: the sample is checked whole;
        ``declared_values``: the call holds the scenario's declared input values)."""
        return not self.sparse or checked_whole or declared_values or counts(layout, counted, keep)

    def ran(self, event_ms: float) -> None:
        """Record a timed call of the original that took ``event_ms``."""
        self.times_ms.append(event_ms)
