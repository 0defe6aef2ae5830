"""Mutators that run inside ``attnq evolve``: the knob mutator (no model) and the headless command.

(The third mutator, any MCP client, drives the search through the ``evolve_next``/``evolve_submit``
tools: see mcp_server/tools_evolve.py.)

**Knob mutator.** A knob is a compile-time integer of the source: ``#define NAME 64``, ``constexpr int
NAME = 64;`` or a padding ``constexpr int NAME = D + 8;`` (the trailing literal). Domains come from
``--knob NAME=v1,v2,...`` (tied knobs: ``--knob A,B=a1:b1,a2:b2``); without any, every knob found in the
seed is searched over {v/2, v, 2v} for a power of two, else {v - s, v, v + s} with s the largest power
of two dividing v. The bandit picks *which* knob (its arm ``knob:NAME``); the mutator picks a new
setting with the run's seeded generator, preferring settings no known program has. A crossover takes
each knob from the inspiration program with probability 1/2 (at least one).

**Command mutator** (``--mutator-cmd "..."``): the contract is the brief's text on stdin and the child's
complete source on stdout (when stdout holds fenced code blocks, the longest one is the source);
exit status 0. The brief as JSON is also in the file named by ``ATTNQ_EVOLVE_BRIEF``, and
``ATTNQ_EVOLVE_TICKET``, ``ATTNQ_EVOLVE_QUESTION_ID``, ``ATTNQ_EVOLVE_ARM`` are set. Up to
``parallel`` commands run at once, each killed (with its process group) after ``timeout_s``.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from evolve.brief import MutationBrief
from evolve.config import KnobSpec
from evolve.dedup import norm_sha256
from harness.errors import InputError
from harness.procs import communicate_or_kill

_DEFINE = re.compile(r"^(?P<pre>[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+\(?)(?P<val>\d+)"
                     r"(?P<post>\)?[ \t]*(?://[^\n]*|/\*[^\n]*)?)$", re.MULTILINE)
_CONSTEXPR = re.compile(r"^(?P<pre>[ \t]*(?:static[ \t]+)?constexpr[ \t]+(?:unsigned[ \t]+)?(?:int|size_t|int64_t|"
                        r"uint32_t|long)[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*=[ \t]*(?:[A-Za-z_]\w*[ \t]*\+[ \t]*)?)"
                        r"(?P<val>\d+)(?P<post>[uUlL]*[ \t]*;[^\n]*)$", re.MULTILINE)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.DOTALL)


class MutationOutcome(BaseModel):
    """A mutator's answer for one ticket: the child's source, or why there is none."""

    ticket_id: int
    source: str | None = None
    error: str | None = None
    arm_id: str | None = Field(default=None, description="set when the mutator decided the arm itself")
    note: str = ""
    duration_s: float = 0.0


def find_knobs(source: str) -> dict[str, int]:
    """Knobs of ``source``: name -> current value (first definition of each name, in source order)."""
    found: dict[str, tuple[int, int]] = {}
    for rx in (_DEFINE, _CONSTEXPR):
        for m in rx.finditer(source):
            found.setdefault(m["name"], (m.start(), int(m["val"])))
    return {k: v for k, (_, v) in sorted(found.items(), key=lambda kv: kv[1][0])}


def default_domain(value: int) -> list[int]:
    """{v/2, v, 2v} for a power of two >= 2 (within 1..1024), else {v - s, v, v + s} (s: largest power of
    two dividing v; 1 for odd v, 4 for 0)."""
    if value >= 2 and value & (value - 1) == 0:
        return sorted({max(1, value // 2), value, min(1024, value * 2)})
    step = (value & -value) if value else 4
    return sorted({max(0, value - step), value, value + step})


def knob_specs(source: str, explicit: Sequence[KnobSpec]) -> list[KnobSpec]:
    """The knobs a run searches: ``explicit`` ones (each name must exist in ``source``), else every knob
    found with its default domain. Raises InputError for an unknown name or a source without knobs."""
    found = find_knobs(source)
    if explicit:
        missing = [n for k in explicit for n in k.names if n not in found]
        if missing:
            raise InputError(f"knob(s) {', '.join(missing)} not found in the seed: a knob is `#define NAME <int>` "
                             f"or `constexpr int NAME = <int>;` (found: {', '.join(found) or 'none'})")
        return list(explicit)
    if not found:
        raise InputError("the seed has no compile-time integer to tune (#define NAME <int> or constexpr int "
                         "NAME = <int>;): give knobs with --knob NAME=v1,v2 or use another mutator")
    return [KnobSpec(names=[n], values=[[v] for v in default_domain(val)]) for n, val in found.items()]


def set_knobs(source: str, values: dict[str, int]) -> str:
    """``source`` with each named knob's first definition set to the given value."""
    out = source
    for name, val in values.items():
        for rx in (_DEFINE, _CONSTEXPR):
            m = next((m for m in rx.finditer(out) if m["name"] == name), None)
            if m is not None:
                out = out[:m.start("val")] + str(val) + out[m.end("val"):]
                break
        else:
            raise InputError(f"knob {name} is not defined in the program")
    return out


class KnobMutator:
    """The model-free mutator (module docstring). Deterministic given the generator."""

    name = "knob"

    def __init__(self, knobs: Sequence[KnobSpec]) -> None:
        self.knobs = {k.key: k for k in knobs}

    def mutate(self, parent: str, arm_id: str, rng: random.Random, *, known: set[str],
               inspiration: str | None = None) -> tuple[str, str]:
        """A child of ``parent`` with knob ``arm_id`` changed (or a crossover with ``inspiration``).

        Returns ``(source, note)``. ``known``: normalized hashes of the run's programs (avoided when
        possible). Raises InputError for an unknown arm or a parent without the knob.
        """
        if inspiration is not None:
            return self._crossover(parent, inspiration, rng, known)
        spec = self.knobs.get(arm_id)
        if spec is None:
            raise InputError(f"no knob {arm_id!r} (knobs: {', '.join(self.knobs)})")
        cur = find_knobs(parent)
        now = [cur.get(n) for n in spec.names]
        options = [v for v in spec.values if v != now]
        if not options:
            raise InputError(f"{arm_id} has a single setting; nothing to change")
        rng.shuffle(options)
        children = [(set_knobs(parent, dict(zip(spec.names, v))), v) for v in options]
        src, val = next(((s, v) for s, v in children if norm_sha256(s) not in known), children[0])
        note = f"{','.join(spec.names)}: {':'.join(map(str, now))} -> {':'.join(map(str, val))}"
        return src, note

    def _crossover(self, parent: str, other: str, rng: random.Random, known: set[str]) -> tuple[str, str]:
        mine, theirs = find_knobs(parent), find_knobs(other)
        names = [n for spec in self.knobs.values() for n in spec.names if n in mine and n in theirs]
        differ = [n for n in names if mine[n] != theirs[n]]
        if not differ:
            raise InputError("crossover: the inspiration has the same knob settings as the parent")
        take = [n for n in differ if rng.random() < 0.5] or [rng.choice(differ)]
        child = set_knobs(parent, {n: theirs[n] for n in take})
        return child, "crossover: " + ", ".join(f"{n} {mine[n]} -> {theirs[n]}" for n in take)


def extract_source(stdout: str) -> str:
    """The child's source in a command's stdout: the longest fenced block if any, else all of it."""
    blocks = _FENCE.findall(stdout)
    text = max(blocks, key=len) if blocks else stdout
    return text.strip("\n") + "\n" if text.strip() else ""


class CommandMutator:
    """Runs ``cmd`` (through ``/bin/sh -c``) per brief: brief on stdin, child on stdout (module docstring)."""

    name = "command"

    def __init__(self, cmd: str, *, parallel: int = 2, timeout_s: float = 1800.0, workdir: Path) -> None:
        if not cmd.strip():
            raise InputError("--mutator-cmd is empty")
        self.cmd, self.parallel, self.timeout_s = cmd, parallel, timeout_s
        self.workdir = Path(workdir)

    def mutate_one(self, brief: MutationBrief) -> MutationOutcome:
        """Run the command for one brief."""
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        brief_file = self.workdir / f"brief-{brief.ticket_id}.json"
        brief_file.write_text(brief.model_dump_json(indent=1), encoding="utf-8")
        env = dict(os.environ, ATTNQ_EVOLVE_BRIEF=str(brief_file), ATTNQ_EVOLVE_TICKET=str(brief.ticket_id),
                   ATTNQ_EVOLVE_QUESTION_ID=brief.question_id or "", ATTNQ_EVOLVE_ARM=brief.arm)
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", self.cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        except OSError as exc:
            return MutationOutcome(ticket_id=brief.ticket_id, error=f"cannot start the mutator: {exc}")
        out, err, timed_out = communicate_or_kill(proc, self.timeout_s, brief.text)
        if timed_out:
            return MutationOutcome(ticket_id=brief.ticket_id, error=f"the mutator timed out after {self.timeout_s:g} s",
                                   duration_s=round(time.monotonic() - t0, 3))
        dur = round(time.monotonic() - t0, 3)
        if proc.returncode != 0:
            tail = " | ".join(ln for ln in (err or "").splitlines()[-3:] if ln.strip())
            return MutationOutcome(ticket_id=brief.ticket_id, duration_s=dur,
                                   error=f"the mutator exited with status {proc.returncode}: {tail[:300]}")
        source = extract_source(out)
        if not source:
            return MutationOutcome(ticket_id=brief.ticket_id, error="the mutator printed no source on stdout",
                                   duration_s=dur)
        return MutationOutcome(ticket_id=brief.ticket_id, source=source, duration_s=dur)

    def mutate_many(self, briefs: Sequence[MutationBrief]) -> list[MutationOutcome]:
        """Run up to ``parallel`` commands at once; outcomes in the order of ``briefs``."""
        if not briefs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(briefs)), thread_name_prefix="attnq-mutator") as ex:
            return list(ex.map(self.mutate_one, briefs))
