"""Triggers: when to ask a question, detected from the campaign store's attempt history.

Rules (issue 4; thresholds from ``harness.config.Settings``, defaults in brackets). Attempts compare like
with like (questions/compare.py): on one measure (the goal anchor where both have it, else vs the
original), over the scenarios both ran; attempts on other scenarios (another suite, < 50 % in common)
do not compare and are left out of the windows and "best" (:func:`best_and_measure`).

- ``stall``: the best geomean did not improve by >= ``stall_min_gain`` [1 %] over the last
  ``stall_window`` [4] *verified* (status correct, geomean known) attempts, relative to the best
  before them (or the original kernel, 1.00x, when there is none); or the last ``stall_failures``
  [3] attempts failed (compile/policy/ABI error, incorrect, or a run that ended in error).
  Environment errors (no GPU, missing toolchain, bad input) neither count nor break a streak.
- ``suspicious_win`` (about the latest attempt): its geomean is >= ``suspicious_jump`` [1.3] x the
  previous best; or the verdict carries a peak/jump flag or a scenario's TFLOP/s exceeds
  ``physical_peak_tflops``; or > 50 % of the log-geomean gain over the previous best comes from
  <= 10 % of the scenarios (at least 5 common scenarios, gain >= ``stall_min_gain``).
- ``churn`` (about the latest attempt; compiled-only attempts and environment errors are ignored,
  since re-running the same source after them is normal): its source, after removing comments and whitespace, is
  identical to an earlier attempt; or nearly identical (difflib line ratio >= 0.98) to an earlier
  attempt other than its predecessor AND closer to it than to its predecessor (it went back); or it
  re-adds lines that an earlier edit removed (>= 2 lines, or all of its added lines).
- ``declared_limit`` / ``declared_done``: explicit claims (questions/reflect.py ``declare``);
  :func:`check_goal` and :func:`limit_evidence` supply their evidence.

Cooldown (``cooldown=True``, used after every attempt): a stall does not fire again while its
evidence window contains a stall question already asked; suspicious_win/churn fire once per attempt.
Every hit carries its evidence in numbers. Pure functions of attempts and asked questions; no CUDA.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from harness.config import Settings
from harness.scenarios import GOAL_SUITE
from harness.store import AskedQuestion, AttemptRecord, CampaignStore
from questions.bank import Trigger
from questions.compare import (
    ORIGINAL,
    Comparison,
    best_comparable,
    compare,
    describe,
    fmt_value,
    goal_anchor,
    measure_for,
    measure_name,
    scenario_values,
    value,
)

#: Error codes that say nothing about the candidate: skipped by the failure streak.
ENVIRONMENT_ERROR_CODES = frozenset({"no_gpu", "toolchain_missing", "input_error", "outside_workspace",
                                     "verify_error", "store_error"})
#: Error codes of a verification that never judged the candidate (no GPU here, no toolchain, a bad path,
#: suite or scenario id, an unusable store): recorded as an event, not as an attempt, so they never feed
#: the stall trigger (questions.reflect.on_attempt). ``verify_error`` is not among them: a candidate whose
#: library kills the worker while loading ends that way too.
NOT_ATTEMPT_CODES = frozenset({"no_gpu", "toolchain_missing", "input_error", "outside_workspace", "store_error"})
NEAR_IDENTICAL_RATIO = 0.98
CONCENTRATION_SHARE = 0.5
CONCENTRATION_SCENARIO_FRACTION = 0.10
CONCENTRATION_MIN_SCENARIOS = 5
PEAK_FLAG_KINDS = frozenset({"above_physical_peak", "above_measured_peak", "suspicious_jump"})
#: Priority when several triggers fire on one attempt (first wins).
PRIORITY: tuple[str, ...] = ("suspicious_win", "churn", "stall")


class TriggerHit(BaseModel):
    """The outcome of one trigger rule: whether it fired and the evidence, in numbers."""

    trigger: Trigger
    fired: bool
    evidence: str = Field(description='e.g. "best 1.84x (#11) not improved by >= 1% over 4 verified attempts #12–#16"')
    data: dict[str, Any] = Field(default_factory=dict, description="the numbers behind the evidence")
    attempt_seq: int | None = Field(default=None, description="the attempt the hit is about (latest)")


def _rng(a: int, b: int) -> str:
    return f"#{a}" if a == b else f"#{a}–#{b}"


def is_failure(a: AttemptRecord) -> bool | None:
    """True: a failed attempt (compile/policy/ABI, incorrect, run error); False: correct; None: says nothing."""
    if a.status == "correct":
        return False
    if a.status in ("incorrect", "failed_compile"):
        return True
    if a.status == "error":
        if a.verdict is not None:
            return True  # the run ended early: a crash, a hang
        return None if (a.error_code or "error") in ENVIRONMENT_ERROR_CODES else True
    return None  # compiled only


def verified(attempts: Sequence[AttemptRecord]) -> list[AttemptRecord]:
    """Attempts whose verification passed and produced a geomean, in order."""
    return [a for a in attempts if a.status == "correct" and a.geomean_speedup is not None]


def suite_of(a: AttemptRecord) -> str | None:
    """The suite an attempt was verified on (None without a verdict)."""
    return a.verdict.suite if a.verdict is not None else None


def same_suite(attempts: Sequence[AttemptRecord], ref: AttemptRecord | None) -> list[AttemptRecord]:
    """The verified attempts on ``ref``'s suite (all verified attempts when ``ref`` is None). The rules
    compare attempts with :func:`comparable_with` (scenarios in common, one measure) rather than by suite name."""
    if ref is None:
        return verified(attempts)
    return [a for a in verified(attempts) if suite_of(a) == suite_of(ref)]


def comparable_with(attempts: Sequence[AttemptRecord], ref: AttemptRecord) -> dict[int, Comparison]:
    """Per seq, the verified attempts that compare with ``ref`` (questions/compare.py: one measure, enough
    scenarios in common) and their comparison against it; ``ref`` itself is among them when verified."""
    out = {}
    for a in verified(attempts):
        c = compare(a, ref, anchor=goal_anchor(ref))
        if c.comparable and c.ratio is not None:
            out[a.seq] = c
    return out


def best_and_measure(attempts: Sequence[AttemptRecord]) -> tuple[AttemptRecord, str] | None:
    """The best verified attempt like with like and the measure it was chosen on: among the attempts that
    compare with the latest verified one (questions/compare.py), the highest per-scenario ratio over it."""
    ver = verified(attempts)
    if not ver:
        return None
    found = best_comparable(ver, ver[-1])
    return (found[0], found[1].measure) if found else (ver[-1], measure_for(ver[-1], ver[-1]))


def best_attempt(attempts: Sequence[AttemptRecord]) -> AttemptRecord | None:
    """The best verified attempt on the scenarios in common with the latest verified one, on its goal anchor's
    measure where both have it (:func:`best_and_measure`); earliest on ties; None when none is verified.
    Attempts on other scenario sets (another suite, too few scenarios in common) are not candidates."""
    found = best_and_measure(attempts)
    return found[0] if found else None


def _failure_label(a: AttemptRecord) -> str:
    if a.status == "incorrect" and a.verdict is not None:
        return f"#{a.seq} incorrect ({len(a.failed)}/{a.num_scenarios} scenarios failed)"
    if a.status == "failed_compile":
        return f"#{a.seq} {a.error_code}"
    return f"#{a.seq} {a.status}" + (f" ({a.error_code})" if a.error_code else "")


def state_summary(attempts: Sequence[AttemptRecord]) -> str:
    """One line on the campaign: attempts, verified, the best (like with like, naming its measure and suite),
    how many verified attempts did not compare with the latest, and the latest attempt."""
    if not attempts:
        return "no attempts recorded yet"
    found = best_and_measure(attempts)
    last = attempts[-1]
    ver = verified(attempts)
    if last.geomean_speedup is not None:
        m = measure_for(last, last)
        last_txt = f"{last.status} {fmt_value(value(last, m), m)} on {suite_of(last)}"
    else:
        last_txt = _failure_label(last).split(" ", 1)[1] if is_failure(last) else last.status
    best_txt = "no verified attempt yet"
    if found is not None:
        best, m = found
        best_txt = f"best {describe(best, m)}"
        others = len(ver) - len(comparable_with(ver, ver[-1]))
        if others:
            best_txt += (f" among the attempts comparable with #{ver[-1].seq} ({others} verified on other "
                         f"scenarios not compared)")
    return f"{len(attempts)} attempts, {len(ver)} verified; {best_txt}; last #{last.seq} {last_txt}"


def _asked_since(asked: Sequence[AskedQuestion], trigger: str, first_seq: int) -> bool:
    return any(q.trigger == trigger and q.fired and q.attempt_seq >= first_seq for q in asked)


def check_stall(attempts: Sequence[AttemptRecord], settings: Settings,
                asked: Sequence[AskedQuestion] = (), *, cooldown: bool = False) -> TriggerHit:
    """The ``stall`` rule (see the module docstring). Evidence names the window and the numbers."""
    last_seq = attempts[-1].seq if attempts else None
    # failure streak
    streak: list[AttemptRecord] = []
    for a in reversed(attempts):
        f = is_failure(a)
        if f is None:
            continue
        if not f:
            break
        streak.append(a)
    streak.reverse()
    k = settings.stall_failures
    if len(streak) >= k:
        window = streak[-k:]
        ev = (f"{len(streak)} consecutive failed attempts {_rng(streak[0].seq, streak[-1].seq)}: "
              + ", ".join(_failure_label(a) for a in window))
        fired = not (cooldown and _asked_since(asked, "stall", window[0].seq))
        return TriggerHit(trigger="stall", fired=fired, evidence=ev, attempt_seq=last_seq,
                          data={"kind": "failures", "consecutive_failures": len(streak),
                                "seqs": [a.seq for a in streak], "statuses": [a.status for a in streak]})
    ver = verified(attempts)
    latest = ver[-1] if ver else None
    scores = comparable_with(ver, latest) if latest is not None else {}
    excluded = [a.seq for a in ver if a.seq not in scores]
    ver = [a for a in ver if a.seq in scores]  # like with like: attempts that compare with the latest verified
    n = settings.stall_window
    if latest is None or len(ver) < n:
        return TriggerHit(trigger="stall", fired=False, attempt_seq=last_seq,
                          evidence=f"{len(ver)} verified attempts comparable with the latest (< window {n}); "
                                   f"{len(streak)} consecutive failures",
                          data={"kind": "none", "verified": len(ver), "consecutive_failures": len(streak),
                                "not_compared_seqs": excluded})
    window = ver[-n:]
    before = ver[:-n]

    def score(a: AttemptRecord) -> float:
        return scores[a.seq].ratio or 0.0

    ref = max(before, key=score) if before else None
    best_w = max(window, key=score)
    if ref is not None:
        c = compare(best_w, ref, anchor=goal_anchor(latest))
        m = c.measure
        gain = (c.ratio - 1) if c.comparable and c.ratio else score(best_w) / (score(ref) or 1.0) - 1
        on = f" on {c.common} common scenarios" if c.comparable and c.common else ""
        ref_txt = f"best {describe(ref, m)}"
    else:  # nothing verified before the window: the original kernel, 1.00x
        m, on = ORIGINAL, ""
        gain = (best_w.geomean_speedup or 0.0) - 1
        ref_txt = "the original kernel (1.00x)"
    data = {"kind": "plateau", "measure": m, "suite": suite_of(latest), "compared_with_seq": latest.seq,
            "reference_geomean": value(ref, m) if ref else 1.0, "reference_seq": ref.seq if ref else None,
            "window_seqs": [a.seq for a in window], "window_best_geomean": value(best_w, m),
            "window_best_seq": best_w.seq, "gain": gain, "min_gain": settings.stall_min_gain,
            "not_compared_seqs": excluded}
    span = _rng(window[0].seq, window[-1].seq)
    skipped = f"; {len(excluded)} verified attempts on other scenarios not compared" if excluded else ""
    if gain >= settings.stall_min_gain:
        return TriggerHit(trigger="stall", fired=False, attempt_seq=last_seq, data=data,
                          evidence=f"improving: {describe(best_w, m)} is {gain:+.1%}{on} over {ref_txt} within the "
                                   f"last {n} verified attempts {span}{skipped}")
    ev = (f"{ref_txt} not improved by >= {settings.stall_min_gain:.0%} over the last {n} verified attempts "
          f"{span} (best of those {describe(best_w, m)}, {gain:+.1%}{on}){skipped}")
    fired = not (cooldown and _asked_since(asked, "stall", window[0].seq))
    return TriggerHit(trigger="stall", fired=fired, evidence=ev, data=data, attempt_seq=last_seq)


def _concentration(new: AttemptRecord, old: AttemptRecord, measure: str = ORIGINAL) -> dict[str, Any] | None:
    if new.verdict is None or old.verdict is None:
        return None
    old_s, new_s = scenario_values(old, measure), scenario_values(new, measure)
    gains = [(i, math.log(v / old_s[i]), old_s[i], v) for i, v in new_s.items() if i in old_s]
    if len(gains) < CONCENTRATION_MIN_SCENARIOS:
        return None
    total = sum(g for _, g, _, _ in gains)
    if total <= 0:
        return None
    k = max(1, math.floor(CONCENTRATION_SCENARIO_FRACTION * len(gains)))
    top = sorted(gains, key=lambda x: x[1], reverse=True)[:k]
    share = sum(g for _, g, _, _ in top) / total
    return {"share": share, "top": [{"id": i, "old_speedup": o, "new_speedup": n} for i, _, o, n in top],
            "top_count": k, "scenarios": len(gains), "geomean_gain": math.exp(total / len(gains)) - 1}


def check_suspicious_win(attempts: Sequence[AttemptRecord], settings: Settings) -> TriggerHit:
    """The ``suspicious_win`` rule on the latest attempt: a jump, above-peak speed, or a concentrated gain."""
    if not attempts:
        return TriggerHit(trigger="suspicious_win", fired=False, evidence="no attempts recorded yet")
    last = attempts[-1]
    reasons: list[str] = []
    data: dict[str, Any] = {}
    v = last.verdict
    if v is not None:
        for f in v.flags:
            if f.kind in PEAK_FLAG_KINDS:
                reasons.append(f"verdict flag {f.kind}" + (f" on {f.scenario_id}" if f.scenario_id else "")
                               + f": {f.message}")
        if v.physical_peak_tflops:
            over = [s for s in v.scenarios if s.tflops is not None and s.tflops > v.physical_peak_tflops]
            flagged = {f.scenario_id for f in v.flags if f.kind in PEAK_FLAG_KINDS}
            for s in over:
                if s.id in flagged:
                    continue  # already named by the verdict's flag
                reasons.append(f"{s.id} at {s.tflops:.0f} TFLOP/s > physical peak {v.physical_peak_tflops:.0f}")
            data["above_physical_peak"] = [s.id for s in over]
    g = last.geomean_speedup if last.status == "correct" else None
    # like with like: the best earlier attempt that compares with this one (questions/compare.py)
    found = best_comparable(verified(attempts[:-1]), last) if g is not None else None
    if found is not None:
        prev, c = found
        ratio = 1 / (c.ratio or 1.0)  # c is prev against last
        m = c.measure
        pv, lv_ = value(prev, m), value(last, m)
        data.update(previous_best_seq=prev.seq, previous_best_geomean=pv, geomean=lv_, jump=ratio, measure=m,
                    suite=suite_of(last), common_scenarios=c.common)
        if ratio >= settings.suspicious_jump:
            nums = (f"{pv:.2f}x (#{prev.seq}) -> {lv_:.2f}x (#{last.seq})" if m == ORIGINAL and pv and lv_ else
                    f"{fmt_value(pv, m)} (#{prev.seq}) -> {fmt_value(lv_, m)} (#{last.seq})")
            over = f" over the {c.common} scenarios both ran" if c.common else ""
            reasons.append(f"geomean {measure_name(m)} on {suite_of(last)} {nums} in one step: {ratio:.2f}x >= "
                           f"{settings.suspicious_jump:.2f}x{over}")
        if ratio >= 1 + settings.stall_min_gain:
            conc = _concentration(last, prev, m)
            if conc is not None:
                data["concentration"] = conc
                if conc["share"] > CONCENTRATION_SHARE:
                    tops = ", ".join(f"{t['id']} {t['old_speedup']:.2f}x -> {t['new_speedup']:.2f}x" for t in conc["top"])
                    reasons.append(f"{conc['share']:.0%} of the log-geomean gain {measure_name(m)} over #{prev.seq} "
                                   f"comes from {conc['top_count']} of {conc['scenarios']} scenarios ({tops})")
    data["reasons"] = reasons
    if not reasons:
        return TriggerHit(trigger="suspicious_win", fired=False, attempt_seq=last.seq, data=data,
                          evidence=f"#{last.seq}: no jump, peak or concentration signal")
    return TriggerHit(trigger="suspicious_win", fired=True, attempt_seq=last.seq, data=data,
                      evidence=f"#{last.seq}: " + "; ".join(reasons))


_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")


def normalize_source(text: str) -> list[str]:
    """Source lines without comments, blank lines and whitespace differences (for churn)."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text))
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _substantive(line: str) -> bool:
    return len(line) >= 8 and any(c.isalnum() for c in line)


def check_churn(attempts: Sequence[AttemptRecord]) -> TriggerHit:
    """The ``churn`` rule on the latest attempt; the evidence names the earlier attempt(s)."""
    # only attempts that say something about the source: not compiled-only, not environment errors
    hist = [a for a in attempts if a.source_text is not None and is_failure(a) is not None]
    if len(hist) < 2 or hist[-1] is not attempts[-1]:
        return TriggerHit(trigger="churn", fired=False, evidence="fewer than two archived sources",
                          attempt_seq=attempts[-1].seq if attempts else None)
    last = hist[-1]
    norm = {a.seq: normalize_source(a.source_text or "") for a in hist}
    cur = norm[last.seq]
    pred = hist[-2]
    for a in reversed(hist[:-1]):
        if norm[a.seq] == cur:
            res = f" ({a.status}, {a.geomean_speedup:.2f}x)" if a.geomean_speedup is not None else f" ({a.status})"
            return TriggerHit(trigger="churn", fired=True, attempt_seq=last.seq,
                              evidence=f"#{last.seq} is identical (ignoring comments and whitespace) to #{a.seq}{res}",
                              data={"kind": "identical", "earlier_seq": a.seq, "ratio": 1.0})
    pred_ratio = difflib.SequenceMatcher(None, norm[pred.seq], cur, autojunk=False).ratio()
    best: tuple[float, AttemptRecord] | None = None
    for a in hist[:-2]:
        sm = difflib.SequenceMatcher(None, norm[a.seq], cur, autojunk=False)
        if sm.quick_ratio() < NEAR_IDENTICAL_RATIO:
            continue
        r = sm.ratio()
        if r >= NEAR_IDENTICAL_RATIO and r > pred_ratio and (best is None or r > best[0]):
            best = (r, a)
    if best is not None:
        r, a = best
        return TriggerHit(trigger="churn", fired=True, attempt_seq=last.seq,
                          evidence=f"#{last.seq} is nearly identical to #{a.seq} (line ratio {r:.3f}), closer to it "
                                   f"than to its predecessor #{pred.seq} ({pred_ratio:.3f})",
                          data={"kind": "near_identical", "earlier_seq": a.seq, "ratio": r,
                                "predecessor_seq": pred.seq, "predecessor_ratio": pred_ratio})
    added = {ln for ln in set(cur) - set(norm[pred.seq]) if _substantive(ln)}
    best_re: tuple[set[str], AttemptRecord] | None = None
    for prev_a, a in itertools.pairwise(hist[:-1]):
        removed = {ln for ln in set(norm[prev_a.seq]) - set(norm[a.seq]) if _substantive(ln)}
        back = added & removed
        if back and (best_re is None or len(back) >= len(best_re[0])):
            best_re = (back, a)
    if best_re is not None:
        back, a = best_re
        if len(back) >= 2 or back == added:
            example = min(back)
            return TriggerHit(trigger="churn", fired=True, attempt_seq=last.seq,
                              evidence=f"#{last.seq} re-adds {len(back)} line(s) that #{a.seq} removed "
                                       f"(e.g. `{example[:80]}`)",
                              data={"kind": "re_added", "earlier_seq": a.seq, "lines": sorted(back)[:20]})
    return TriggerHit(trigger="churn", fired=False, attempt_seq=last.seq, data={"predecessor_ratio": pred_ratio},
                      evidence=f"#{last.seq} differs from earlier attempts (line ratio to #{pred.seq}: {pred_ratio:.3f})")


def _goal_value(a: AttemptRecord, against: str) -> float | None:
    """``a``'s geomean on the goal's anchor (vs the original for 'original')."""
    return value(a, against)


def _same_goal(a: AttemptRecord, goal: Any) -> bool:
    """True when ``a`` was verified against ``goal``'s anchor with at least its minimum speedup."""
    g = a.verdict.goal if a.verdict is not None else None
    return g is not None and g.against == goal.against and g.min_speedup >= goal.min_speedup


def _held_to_goal(a: AttemptRecord, min_speedup: float | None) -> AttemptRecord:
    """``a`` with its verdict's goal marked unmet when it was verified against a goal below ``min_speedup``."""
    v = a.verdict
    if min_speedup is None or v is None or not v.goal.met or v.goal.min_speedup >= min_speedup:
        return a
    goal = v.goal.model_copy(update={"met": False, "min_speedup": min_speedup, "reason":
                                     f"verified against a goal of {v.goal.min_speedup:g}x, below the campaign's "
                                     f"{min_speedup:g}x"})
    return a.model_copy(update={"verdict": v.model_copy(update={"goal": goal})})


def _held_to_suite(a: AttemptRecord, goal_ids: frozenset[str] | None) -> AttemptRecord:
    """``a`` with its verdict's goal marked unmet when it did not run every scenario of the goal suite as it is now
    (``goal_ids``; None: not checked): a verdict of an older, smaller suite (a trace imported from before the suite
    grew) proves nothing about the scenarios added since."""
    v = a.verdict
    if goal_ids is None or v is None or not v.goal.met or v.suite != GOAL_SUITE:  # only the goal suite meets it
        return a
    ran = {s.id for s in v.scenarios}
    missing = len(goal_ids - ran) if ran else max(0, len(goal_ids) - v.num_scenarios)
    if not missing:
        return a
    goal = v.goal.model_copy(update={"met": False, "reason": (
        f"verified on {v.num_scenarios} scenarios of {v.suite}; the goal suite now has {len(goal_ids)} "
        f"({missing} not run then): verify it again")})
    return a.model_copy(update={"verdict": v.model_copy(update={"goal": goal})})


def check_goal(attempts: Sequence[AttemptRecord], min_speedup: float | None = None,
               goal_ids: frozenset[str] | None = None) -> TriggerHit:
    """Goal check for ``declared_done``: ``fired`` is True when the goal is NOT met (the claim is premature).

    Uses ``Verdict.goal`` of the latest verified attempt (any attempt with a verdict) and of the best
    one; when not met the evidence names the failing scenarios (``Verdict.failed``) or the gap. A
    verdict whose goal was set below ``min_speedup`` (the campaign's goal, Settings.goal_speedup)
    does not count as meeting it, nor one that did not run every scenario id in ``goal_ids`` (the goal
    suite as it is now; None: not checked).
    """
    attempts = [_held_to_suite(_held_to_goal(a, min_speedup), goal_ids) for a in attempts]
    with_v = [a for a in attempts if a.verdict is not None]
    if not with_v:
        return TriggerHit(trigger="declared_done", fired=True, data={"goal_met": False},
                          evidence="goal not met: no attempt has been verified",
                          attempt_seq=attempts[-1].seq if attempts else None)
    latest = with_v[-1]
    best = best_attempt(attempts)  # like with like: on the scenarios in common with the latest verified
    lv = latest.verdict
    assert lv is not None
    against = lv.goal.against
    data: dict[str, Any] = {"latest_seq": latest.seq, "best_seq": best.seq if best else None,
                            "min_speedup": lv.goal.min_speedup, "against": against, "suite": lv.suite}
    if lv.goal.met:
        g = _goal_value(latest, against)
        data["goal_met"] = True
        return TriggerHit(trigger="declared_done", fired=False, attempt_seq=latest.seq, data=data,
                          evidence=f"goal met by #{latest.seq}: all {lv.num_scenarios} scenarios of {lv.suite} "
                                   f"correct, geomean {fmt_value(g, against)} >= {lv.goal.min_speedup:.2f}x" if g else
                                   f"goal met by #{latest.seq}")
    # the best meets the goal only when it was verified against the latest's goal (anchor, minimum)
    if best is not None and best.verdict is not None and best.verdict.goal.met and _same_goal(best, lv.goal):
        data["goal_met"] = True
        return TriggerHit(trigger="declared_done", fired=False, attempt_seq=latest.seq, data=data,
                          evidence=f"goal met by #{best.seq} ({describe(best, against)}) but not by the latest "
                                   f"verified #{latest.seq}: {lv.goal.reason or lv.status}")
    data["goal_met"] = False
    parts = []
    if lv.failed:
        shown = ", ".join(lv.failed[:6]) + (f" and {len(lv.failed) - 6} more" if len(lv.failed) > 6 else "")
        parts.append(f"{len(lv.failed)} of {lv.num_scenarios} scenarios fail on #{latest.seq} ({shown})")
        data["failed"] = list(lv.failed)
    ref = best if best is not None and _goal_value(best, against) is not None else latest
    g = _goal_value(ref, against)  # read on the latest's goal anchor, whatever the best's own goal was
    if g is not None:
        gap = lv.goal.min_speedup / g - 1
        data.update(geomean=g, gap=gap, geomean_seq=ref.seq)
        if gap > 0:
            parts.append(f"best geomean {describe(ref, against)} is {gap:.1%} short of the goal "
                         f"{lv.goal.min_speedup:.2f}x {measure_name(against)}")
    if not parts:
        parts.append(lv.goal.reason or f"#{latest.seq} status {lv.status}")
    return TriggerHit(trigger="declared_done", fired=True, attempt_seq=latest.seq, data=data,
                      evidence="goal not met: " + "; ".join(parts))


def limit_evidence(attempts: Sequence[AttemptRecord]) -> TriggerHit:
    """Evidence for ``declared_limit``: the best attempt like with like (:func:`best_and_measure`, naming its
    measure and suite), its spread of fraction-of-peak, its groups and worst scenarios."""
    found = best_and_measure(attempts)
    best, m = found if found is not None else (None, ORIGINAL)
    if best is None or best.verdict is None:
        return TriggerHit(trigger="declared_limit", fired=True, data={},
                          evidence="limit claimed with no verified attempt",
                          attempt_seq=attempts[-1].seq if attempts else None)
    v = best.verdict
    parts = [f"best {describe(best, m)}"]
    data: dict[str, Any] = {"best_seq": best.seq, "best_geomean": best.geomean_speedup, "measure": m,
                            "best_value": value(best, m), "suite": v.suite}
    fr = sorted(s.fraction_of_peak for s in v.scenarios if s.fraction_of_peak is not None)
    if fr:
        med = fr[len(fr) // 2]
        parts.append(f"fraction of measured peak: median {med:.0%}, max {fr[-1]:.0%}")
        data.update(fraction_of_peak_median=med, fraction_of_peak_max=fr[-1])
    by_group = v.geomean_vs_anchor_by_group.get(m) if m != ORIGINAL else None
    by_group = by_group or v.geomean_by_group
    if by_group:
        gm = m if by_group is not v.geomean_by_group else ORIGINAL
        lo = min(by_group.items(), key=lambda kv: kv[1])
        hi = max(by_group.items(), key=lambda kv: kv[1])
        parts.append(f"groups {measure_name(gm)} from {lo[0]} {lo[1]:.2f}x to {hi[0]} {hi[1]:.2f}x")
        data["geomean_by_group"] = by_group
    sv = scenario_values(best, m) if m != ORIGINAL else {}
    worst = sorted(sv, key=lambda i: sv[i]) or v.worst  # lowest on the measure the best was chosen on
    if worst:
        parts.append(f"worst scenario {worst[0]}" + (f" ({sv[worst[0]]:.2f}x {measure_name(m)})"
                                                      if worst[0] in sv else ""))
        data["worst"] = worst[:3]
    return TriggerHit(trigger="declared_limit", fired=True, attempt_seq=attempts[-1].seq, data=data,
                      evidence="; ".join(parts))


def detect(attempts: Sequence[AttemptRecord], asked: Sequence[AskedQuestion], settings: Settings, *,
           cooldown: bool = True) -> list[TriggerHit]:
    """Fired hits among stall/suspicious_win/churn, in :data:`PRIORITY` order."""
    if not attempts:
        return []
    hits = {"suspicious_win": check_suspicious_win(attempts, settings), "churn": check_churn(attempts),
            "stall": check_stall(attempts, settings, asked, cooldown=cooldown)}
    if cooldown:
        last = attempts[-1].seq
        for t in ("suspicious_win", "churn"):
            if any(q.trigger == t and q.fired and q.attempt_seq == last for q in asked):
                hits[t] = hits[t].model_copy(update={"fired": False})
    return [hits[t] for t in PRIORITY if hits[t].fired]


def detect_triggers(store: CampaignStore, settings: Settings, *, campaign_id: str | None = None,
                    cooldown: bool = True) -> list[TriggerHit]:
    """:func:`detect` on a campaign of the store (the handle's campaign by default)."""
    return detect(store.attempts(campaign_id), store.questions_asked(campaign_id), settings, cooldown=cooldown)
