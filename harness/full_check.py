"""The whole-output check against the fp32 reference: every checked draw, and a secret subset of timed calls.

A checked draw's outputs are compared whole with the fp32 reference (harness/reference.py) under
FlashAttention's rule (harness.checks.tolerances: 2 x the original's error on the same inputs + a floor, per
element; a relative bound per dtype) and then the exactness check (harness/exactness.py). Every timed call is
compared with the fp32 reference on sampled rows and, where the original runs in the sample (every sample but
the uncounted ones of a slow original: harness.timed_samples.OriginalPlan), whole with the original's output
under a looser bound (harness.checks.judge_timed_sample): a full reference on every timed call costs too much
on `full`'s large scenarios. A kernel that knew which calls are the checked draws (the first ``draws`` of a scenario, by
its own call count; a GPU kernel could also read the L2's warmth, before the checked calls went through the
timed path) could be less precise on the others: a few rows off by 2 ulps escape both the whole comparison
with the original and the sampled rows (14 of 40 seeds, tests/test_timed_checked_redteam.py).

So a secret subset of the timed calls gets the checked draws' rule on its whole output (:class:`FullChecks`):
each fresh timed call with probability :data:`FULL_CHECK_RATE`, drawn from the scenario's secret seed, and
the first determinism repeat, whose bits must equal its source's, a uniformly random call of the timed
layout's source slot (harness/repeats.py): checking the repeat checks the source, so where the source's whole
output already passed (a checked draw, or a timed call checked whole) the repeat is not checked whole again: its
bits must equal the source's, judged already (:meth:`FullChecks.wanted`; in a sparse scenario the original then
skips the repeat too, harness.timed_samples.OriginalPlan). The tolerance is never
tighter than the checked draws' of the call's value key (harness.checks.TimedBounds ``tol_o``/``tol_lse``).
Cost: one fp32 reference per such call, about ``1 + FULL_CHECK_RATE x fresh timed calls`` per scenario (less the
first repeats whose source passed whole: 78 of 259 on `full`, by scripts/budget_model.py's replay of run 63)
(1.75 where ``min_samples`` ends the loop: 6 fresh calls besides the 4 repeats; 4.25 at ``max_samples`` 30:
26 fresh calls), next to the checked draws' 2.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

#: Share of the fresh timed calls whose whole output is checked against the fp32 reference (secretly drawn).
FULL_CHECK_RATE = 1 / 8


@dataclass
class WholeCheck:
    """The whole-output comparison of one call: the candidate's and the original's errors against the fp32
    reference (harness.checks.ErrorReport), the tolerances (``tol_o``, ``tol_lse``: absolute, in o's and
    lse's units) and the exactness finding (None: exact where the softmax must be)."""

    rep_c: Any
    rep_o: Any
    tol_o: float
    tol_lse: float
    inexact: str | None

    def failure(self, dtype: Any) -> tuple[str, str, str] | None:
        """None when the candidate passes the checked draws' rule, else ``(failure_kind, check, message)``:
        harness.checks.judge (finite values, lse +inf rows, tolerances, relative bound), then exactness."""
        from harness.checks import judge

        bad = judge(self.rep_c, self.tol_o, self.tol_lse, dtype)
        if bad:
            return bad
        if self.inexact:
            return "wrong_output", "exactness", self.inexact
        return None


def whole_check(sc: Any, bufs_c: Any, bufs_o: Any, *, at_least: tuple[float, float] = (0.0, 0.0)) -> WholeCheck:
    """Compare the candidate's outputs (``bufs_c.o_c [b, sq, hq, d]``, ``bufs_c.lse_c [b, hq, sq]`` fp32) and the
    original's (``bufs_o``) with the fp32 reference on the original's pristine inputs (harness.buffers.Buffers,
    the call's layout and scale). ``at_least``: floors for ``(tol_o, tol_lse)`` (a timed call: its value key's
    checked-draw tolerances). The reference exists only from here on, after both calls."""
    from harness.checks import error_report, tolerances
    from harness.exactness import exactness_failure
    from harness.reference import attention_reference

    o_ref, lse_ref = attention_reference(bufs_o.q, bufs_o.k, bufs_o.v, softmax_scale=bufs_o.scale, causal=sc.causal)
    rep_o = error_report(bufs_o.o_c, bufs_o.lse_c, o_ref, lse_ref)
    rep_c = error_report(bufs_c.o_c, bufs_c.lse_c, o_ref, lse_ref)
    tol_o, tol_lse = tolerances(rep_o, o_ref, lse_ref)
    del o_ref, lse_ref
    inexact = exactness_failure(bufs_c.o_c, bufs_o.v, causal=sc.causal)
    return WholeCheck(rep_c, rep_o, max(tol_o, at_least[0]), max(tol_lse, at_least[1]), inexact)


class FullChecks:
    """Which timed calls of one scenario get :func:`whole_check`: the first determinism repeat (its source is
    a uniformly random call of the timed layout's source slot) and each fresh timed call with probability
    ``rate``, drawn from ``seed`` (the scenario's secret seed) before the call's outputs exist, so nothing the
    kernel sees before or during a call tells it whether the call will be checked whole."""

    def __init__(self, seed: int, rate: float = FULL_CHECK_RATE) -> None:
        self.rng, self.rate = random.Random(seed), rate
        #: timed calls checked whole so far (the scenario's extra fp32 references)
        self.count = 0
        #: calls (harness.draws.CallDraw.call) whose whole output passed the rule: the checked draws
        #: (:meth:`passed`) and the timed calls checked whole
        self.checked: set[int] = set()
        #: first repeats not checked whole because their source was (the references saved)
        self.skipped = 0

    def wanted(self, draw: Any) -> bool:
        """Whether the timed call ``draw`` (harness.draws.CallDraw) is checked whole; counts it when it is.
        The first repeat is, unless its source's whole output already passed (:attr:`checked`): the repeat
        must reproduce the source's bits (reordered as its inputs are), so checking it whole would judge
        the same bits against the same reference (reordered) under a rule at least as loose as the source's."""
        if draw.repeat is not None:
            hit = draw.repeat == 0 and draw.source not in self.checked
            self.skipped += draw.repeat == 0 and not hit
        else:
            hit = self.rng.random() < self.rate
        self.count += hit
        return hit

    def passed(self, call: int) -> None:
        """Record that call ``call`` (a checked draw's, or a timed call checked whole) passed the whole-output rule."""
        self.checked.add(call)
