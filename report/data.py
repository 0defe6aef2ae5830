"""What a report is drawn from: verdicts, one campaign, optional evolve data; loaders and derived numbers.

Sources:
- a verdict: ``Verdict`` JSON as ``attnq verify --json`` prints it, ``.json`` or ``.json.gz``;
- a campaign: the workspace's campaign store (``harness/store.py``) or a published trace
  (``attnq trace export``, ``jsonl`` or ``json``; questions/trace.py describes the format);
- evolve data: :class:`EvolveData` as JSON (any tool that follows the format below), the report of
  ``attnq evolve report --json`` / ``attnq evolve --report FILE.json`` (converted), or, from the store,
  ``evolve.report_data(store, campaign_id)`` (the latest run of the campaign).

Evolve data format (``{"format": "attnq-evolve-report", "version": 1, ...}``)::

    generations: [{"generation": 0, "best_fitness": 1.31, "median_fitness": 1.02,
                   "evaluated": 16, "correct": 11}, ...]          # one row per generation
    lineage:     [{"program_id": "p0", "generation": 0, "parent_id": null, "fitness": 1.0,
                   "question_id": null}, ..., {... the best program}]   # root first, best last
    arms:        {"question": [[evaluations, best_fitness], ...],  # optional ablation arms
                  "make-it-faster": [...], "no-guidance": [...]}
    fitness_against: "original"                                   # what fitness is a geomean against

Fitness is a geomean speedup (> 1 = faster); ``None`` for a program that was not correct.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from harness.errors import InputError
from harness.logging import get_logger
from harness.store import AskedQuestion, AttemptRecord, CampaignStore, ClaimRecord
from harness.verdict import Verdict
from questions.compare import describe
from questions.policy import DEFAULT_HORIZON, ask_outcome
from questions.trace import TRACE_FORMAT
from questions.triggers import best_and_measure

log = get_logger(__name__)

EVOLVE_FORMAT = "attnq-evolve-report"


class LabelledVerdict(BaseModel):
    """A verdict and how the report names it (a file name, ``#4 (best)``)."""

    label: str
    verdict: Verdict


class CampaignData(BaseModel):
    """One campaign's records, from the store or from a trace."""

    campaign_id: str
    source: str = Field(description="where it was read: the store's path or the trace file")
    attempts: list[AttemptRecord] = Field(default_factory=list)
    questions: list[AskedQuestion] = Field(default_factory=list)
    claims: list[ClaimRecord] = Field(default_factory=list)


class EvolveGeneration(BaseModel):
    """One generation of an evolutionary search."""

    generation: int = Field(ge=0)
    best_fitness: float | None = Field(default=None, description="best geomean speedup so far in this generation")
    median_fitness: float | None = None
    evaluated: int = Field(default=0, ge=0, description="programs evaluated in this generation")
    correct: int = Field(default=0, ge=0)


class EvolveProgram(BaseModel):
    """One program of the best program's lineage."""

    program_id: str
    generation: int = Field(ge=0)
    parent_id: str | None = None
    fitness: float | None = None
    question_id: str | None = Field(default=None, description="the mutation question that produced it")


class EvolveData(BaseModel):
    """What the evolve section draws (the module docstring gives the JSON form)."""

    format: Literal["attnq-evolve-report"] = EVOLVE_FORMAT
    version: int = 1
    fitness_against: str = "original"
    generations: list[EvolveGeneration] = Field(default_factory=list)
    lineage: list[EvolveProgram] = Field(default_factory=list, description="root first, best last")
    arms: dict[str, list[tuple[int, float]]] = Field(default_factory=dict,
                                                     description="arm -> [(evaluations, best fitness)]")

    def empty(self) -> bool:
        """True when there is nothing to draw (no generation, no lineage, no arm)."""
        return not self.generations and not self.lineage and not self.arms


class QuestionEffect(BaseModel):
    """How often a question (or a layer) was asked in the campaign and what followed within the horizon.

    ``improved`` counts asks followed by a new best geomean (>= ``min_gain`` over the best before, like with
    like: one measure, the scenarios both ran) within the next ``horizon`` attempts (questions/policy.py ``ask_outcome``, the rule selection learns from);
    ``gains`` holds ``best_after / best_before - 1`` for each ask followed by a verified attempt.
    """

    key: str = Field(description="question id, or layer name for a per-layer row")
    layer: str
    asked: int = 0
    resolved: int = 0
    improved: int = 0
    gains: list[float] = Field(default_factory=list)

    @property
    def median_gain(self) -> float | None:
        """Median of ``gains`` (None when no verified attempt followed any ask)."""
        return statistics.median(self.gains) if self.gains else None


def _read_json_file(path: Path) -> Any:
    """JSON from ``path`` (gzip when it ends in .gz); JSON Lines are returned as a list of objects."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except gzip.BadGzipFile:
        raise InputError(f"{path} is not a gzip file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise InputError(f"{path} is not JSON: {first.msg} at line {first.lineno}") from None


def _invalid(path: Path, what: str, exc: ValidationError) -> InputError:
    errs = exc.errors(include_url=False)
    first = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in errs[:3])
    return InputError(f"{path} is not {what}: {first}" + (f" (+{len(errs) - 3} more)" if len(errs) > 3 else ""))


def load_verdict(path: str | Path) -> LabelledVerdict:
    """A verdict file (``.json`` or ``.json.gz``), labelled with its file name.

    Raises:
        InputError: unreadable, not JSON, or not a verdict (the first fields that do not fit are named).
    """
    p = Path(path)
    data = _read_json_file(p)
    if isinstance(data, dict) and isinstance(data.get("verdict"), dict):
        data = data["verdict"]  # a JobStatus or an attempt record holding a verdict
    try:
        verdict = Verdict.model_validate(data)
    except ValidationError as exc:
        raise _invalid(p, "a verdict", exc) from None
    name = p.name.removesuffix(".gz").removesuffix(".json")
    return LabelledVerdict(label=name, verdict=verdict)


def campaign_from_store(store: CampaignStore, campaign_id: str | None = None) -> CampaignData:
    """The campaign ``campaign_id`` (default: the store's) as read from the store."""
    cid = campaign_id or store.campaign_id
    return CampaignData(campaign_id=cid, source=str(store.path), attempts=store.attempts(cid, with_source=False),
                        questions=store.questions_asked(cid), claims=store.claims(cid))


def load_trace(path: str | Path, campaign_id: str | None = None) -> CampaignData:
    """One campaign of a trace file (``attnq trace export``; jsonl or json).

    Raises:
        InputError: not a trace, no such campaign (the known ones are named), or several campaigns and
            no ``campaign_id``.
    """
    p = Path(path)
    data = _read_json_file(p)
    per: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if isinstance(data, dict) and data.get("format") == TRACE_FORMAT:
        for c in data.get("campaigns", []):
            cid = (c.get("campaign") or {}).get("campaign_id", "")
            per[cid] = {"attempt": c.get("attempts", []), "question": c.get("questions", []),
                        "claim": c.get("claims", [])}
    elif isinstance(data, list) and data and isinstance(data[0], dict) and data[0].get("format") == TRACE_FORMAT:
        for rec in data[1:]:
            kind, cid = rec.get("type"), rec.get("campaign_id", "")
            if kind == "campaign":
                per.setdefault(cid, {"attempt": [], "question": [], "claim": []})
            elif kind in ("attempt", "question", "claim"):
                per.setdefault(cid, {"attempt": [], "question": [], "claim": []})[kind].append(rec)
    else:
        raise InputError(f"{p} is not an attnq trace (write one with `attnq trace export`)")
    if campaign_id is None:
        if len(per) != 1:
            raise InputError(f"{p} holds {len(per)} campaigns ({', '.join(per) or 'none'}): name one with --campaign")
        campaign_id = next(iter(per))
    if campaign_id not in per:
        raise InputError(f"no campaign {campaign_id!r} in {p}; campaigns: {', '.join(per) or 'none'}")
    recs = per[campaign_id]
    try:
        return CampaignData(
            campaign_id=campaign_id, source=str(p),
            attempts=[AttemptRecord.model_validate({k: v for k, v in r.items() if k != "type"}) for r in recs["attempt"]],
            questions=[AskedQuestion.model_validate({k: v for k, v in r.items() if k != "type"}) for r in recs["question"]],
            claims=[ClaimRecord.model_validate({k: v for k, v in r.items() if k != "type"}) for r in recs["claim"]])
    except ValidationError as exc:
        raise _invalid(p, "an attnq trace", exc) from None


def load_evolve(path: str | Path) -> EvolveData:
    """Evolve data from a JSON file (the module docstring gives the format).

    Raises:
        InputError: unreadable, not JSON, or not in the format.
    """
    p = Path(path)
    data = _read_json_file(p)
    if isinstance(data, dict) and "format" not in data and {"status", "generations", "lineage"} <= data.keys():
        try:  # `attnq evolve report --json` / `attnq evolve --report FILE.json`: evolve's own report, converted
            from evolve.report import Report, evolve_data

            data = evolve_data(Report.model_validate(data))
        except ValidationError as exc:
            raise _invalid(p, "an `attnq evolve report --json` report", exc) from None
    try:
        return EvolveData.model_validate(data)
    except ValidationError as exc:
        raise _invalid(p, f"{EVOLVE_FORMAT} data", exc) from None


def evolve_from_store(store: CampaignStore, campaign_id: str) -> EvolveData | None:
    """``evolve.report_data(store, campaign_id)`` when an ``evolve`` package provides it, else None.

    The hook is optional: a missing package, a missing function, or None / an empty result all mean "no
    evolve data" (the report then leaves the section out).
    """
    try:
        import evolve  # type: ignore[import-not-found]
    except ImportError:
        return None
    fn = getattr(evolve, "report_data", None)
    if fn is None:
        return None
    try:
        data = fn(store, campaign_id)
        out = None if data is None else data if isinstance(data, EvolveData) else EvolveData.model_validate(data)
    except Exception as exc:  # noqa: BLE001 - another part's bug must not cost the rest of the report
        log.warning("evolve_report_data_failed", error=f"{type(exc).__name__}: {exc}")
        return None
    return None if out is None or out.empty() else out


def best_verdict(campaign: CampaignData) -> LabelledVerdict | None:
    """The verdict of the campaign's best correct attempt, like with like (questions/triggers.py
    ``best_and_measure``: among the attempts that compare with the latest verified one, on its goal anchor's
    measure), labelled ``<campaign> #4 (best, 0.938x FA3 on full)``; else of its latest attempt with a verdict;
    else None."""
    with_verdict = [a for a in campaign.attempts if a.verdict is not None]
    found = best_and_measure(campaign.attempts)
    if found is not None and found[0].verdict is not None:
        best, m = found
        assert best.verdict is not None
        what = describe(best, m).rsplit(" (#", 1)[0]
        return LabelledVerdict(label=f"{campaign.campaign_id} #{best.seq} (best, {what})", verdict=best.verdict)
    if with_verdict:
        last = with_verdict[-1]
        assert last.verdict is not None
        return LabelledVerdict(label=f"{campaign.campaign_id} #{last.seq} (latest, {last.status})", verdict=last.verdict)
    return None


def question_effects(campaign: CampaignData, *, horizon: int = DEFAULT_HORIZON,
                     min_gain: float = 0.01) -> tuple[list[QuestionEffect], list[QuestionEffect]]:
    """Per question and per layer: asks, resolved asks, asks followed by a gain, and the gains.

    Outcomes are questions/policy.py's ``ask_outcome`` over this campaign's attempts (the same rule the
    selection policy learns from). Rows are ordered by asks (most first), then key.
    """
    per_q: dict[str, QuestionEffect] = {}
    per_layer: dict[str, QuestionEffect] = {}
    attempts: Sequence[AttemptRecord] = campaign.attempts
    for ask in campaign.questions:
        improved, before, after = ask_outcome(attempts, ask.attempt_seq, horizon=horizon, min_gain=min_gain)
        for row in (per_q.setdefault(ask.question_id, QuestionEffect(key=ask.question_id, layer=ask.layer)),
                    per_layer.setdefault(ask.layer, QuestionEffect(key=ask.layer, layer=ask.layer))):
            row.asked += 1
            if improved is not None:
                row.resolved += 1
                row.improved += int(improved)
            if after is not None and before > 0:
                row.gains.append(after / before - 1.0)

    def order(rows: dict[str, QuestionEffect]) -> list[QuestionEffect]:
        return sorted(rows.values(), key=lambda r: (-r.asked, r.key))

    return order(per_q), order(per_layer)
