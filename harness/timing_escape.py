"""The stream-timing escape check of a scenario's timed calls, and the timing diagnostics log.

A kernel that launches its work on another stream returns before the work is done: the events around
the call (on the legacy default stream, harness/launcher.py) then miss it. Two ways to see it
(``Settings.stream_escape_check``):

* ``wall`` (the default until run 23): the candidate's host round trip less its event
  time (``overhead``) against the original's, medians over the samples. The round trip crosses two
  processes (checker -> launcher -> checker), so it carries each launcher's wake-up latency: in run 20
  (2026-12-01, A/A on ``bugs``) the candidate's launcher, called first after the checker's long solo phase
  (and, with the second candidate launcher, idle twice as long), woke 50-150 us slower than the
  original's; every scenario whose kernel is under ~0.2 ms was flagged (41/85) and timed by the noisy
  wall clock (A/A geomean 0.484x; 0.995x over the scenarios not flagged).
* ``tail`` (the default since run 23, 2026-12-01: A/A on ``bugs`` 0/85 flagged, 0.999x; the
  stream-per-thread escape still timed at its full cost): the launcher records a third event after its synchronize returns (all streams of its context
  idle) and reports the device time from the end event to it: GPU timestamps only, taken while the
  launcher's thread spins in the synchronize (no process wake-up in it). A candidate whose tail exceeds
  the original's is timed as event + its tail less the original's median tail. The wall check stays as a
  backstop with a threshold of at least :data:`WALL_BACKSTOP_MS` (event timestamps the wall clock does not
  bear out at all).

Either way the threshold is ``max(0.05 ms, 0.25 x median event time)``. Where the wall clock alone would
convict (:func:`escape_evidence`), the checker first takes more samples (harness.timed_samples ``WALL_MORE``) and
judges over all of them: run 42's #18 had two honest 7 us rows convicted by wake-up bursts in 3 of 5 samples.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Literal

#: The escape threshold's floor (ms) and its share of the candidate's median event time.
MIN_ESCAPE_MS, ESCAPE_SHARE = 0.05, 0.25
#: Floor (ms) of the wall-clock backstop under the ``tail`` check: 3x the wake-up noise seen in run 20.
WALL_BACKSTOP_MS = 0.5


def escape_threshold_ms(t_c: list[float]) -> float:
    """``max(MIN_ESCAPE_MS, ESCAPE_SHARE x median(t_c))`` (ms)."""
    return max(MIN_ESCAPE_MS, ESCAPE_SHARE * statistics.median(t_c))


def judge_escape(mode: Literal["wall", "tail"], t_c: list[float], t_o: list[float], w_c: list[float],
                 w_o: list[float], tail_c: list[float] | None = None,
                 tail_o: list[float] | None = None) -> tuple[list[float], str | None]:
    """The candidate's sample times after the escape check, and the ``stream_timing`` message (None when
    nothing escaped). ``t_*``: event ms, ``w_*``: host round-trip ms, ``tail_*``: device ms from the end
    event to the launcher's synchronize (``tail`` mode; one per sample). Raises ValueError when ``tail``
    mode lacks the tails."""
    times, msg, _ = _judge(mode, t_c, t_o, w_c, w_o, tail_c, tail_o)
    return times, msg


def escape_evidence(mode: Literal["wall", "tail"], t_c: list[float], t_o: list[float], w_c: list[float],
                    w_o: list[float], tail_c: list[float] | None = None,
                    tail_o: list[float] | None = None) -> Literal["tail", "wall"] | None:
    """What :func:`judge_escape` would convict on: ``"tail"`` (the device tails), ``"wall"`` (the host wall
    clock alone: the round trips exceed the original's, the device tails, where asked, do not), or None.

    The checker takes more samples before it judges on ``"wall"`` evidence (harness.timed_samples, ``WALL_MORE``):
    a host wake-up burst of a few ms in 3 of 5 samples convicted an honest 7 us kernel in run 42 (H100,
    2026-12-06, ``bugs`` tail-sweep rows of #18: 0.97 and 1.94 ms "outlived the end event"); work that really
    outlives the event does so on every call, so more samples keep it convicted."""
    return _judge(mode, t_c, t_o, w_c, w_o, tail_c, tail_o)[2]


def _judge(mode: str, t_c: list[float], t_o: list[float], w_c: list[float], w_o: list[float],
           tail_c: list[float] | None, tail_o: list[float] | None) -> tuple[list[float], str | None, Any]:
    """:func:`judge_escape`'s times and message, and the evidence (None, ``"tail"`` or ``"wall"``)."""
    over_c = statistics.median(w - e for w, e in zip(w_c, t_c, strict=True))
    over_o = statistics.median(w - e for w, e in zip(w_o, t_o, strict=True))
    thr = escape_threshold_ms(t_c)
    if mode == "tail":
        if tail_c is None or tail_o is None or len(tail_c) != len(t_c) or len(tail_o) != len(t_o):
            raise ValueError("the tail check needs one device tail per sample of both kernels")
        med_o = statistics.median(tail_o)
        late = statistics.median(tail_c) - med_o
        if late > thr:
            msg = (f"stream_timing: work outlived the end event by {late:.3f} ms per call on the device "
                   "(launched on another stream?); time to the device's idle used")
            return [e + t - med_o for e, t in zip(t_c, tail_c, strict=True)], msg, "tail"
        thr = max(WALL_BACKSTOP_MS, thr)
    elif mode != "wall":
        raise ValueError(f"stream_escape_check must be 'wall' or 'tail', not {mode!r}")
    if over_c > over_o + thr:
        # work finished after the end event (another stream), or an event time the wall clock does not
        # bear out: count the host-observed time (less the original's overhead) instead
        msg = (f"stream_timing: work outlived the end event by {over_c - over_o:.3f} ms per call "
               "(launched on another stream?); host wall-clock time used")
        return [w - over_o for w in w_c], msg, "wall"
    return t_c, None, None


def append_timing_log(path: str | Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` (the diagnostic timing log; created when missing)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
