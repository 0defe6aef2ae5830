"""Restore campaigns from a trace (``attnq trace import``): the reverse of questions/trace.py's export.

Reads either form of a trace (``json`` or ``jsonl``, detected; the formats are described in
questions/trace.py) and writes its campaigns into a store through ``CampaignStore.insert_campaigns``
(harness/store_import.py): every record keeps its fields, timestamps, ``seq`` and ``attempt_seq``,
row ids are the store's own, and the whole import is one transaction. A campaign id that already holds
records is refused; ``rename_to`` (``--as``) imports one campaign under another id.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from pydantic import BaseModel, Field, ValidationError

from harness.errors import InputError
from harness.logging import get_logger
from harness.store import (
    DEFAULT_CAMPAIGN,
    AskedQuestion,
    AttemptRecord,
    CampaignRecords,
    CampaignStore,
    ClaimRecord,
    EventRecord,
    HumanQuestionRecord,
    utc_now,
    validate_campaign_id,
)
from questions.trace import TRACE_FORMAT, TRACE_VERSION

#: jsonl record type -> key of the json form (and of :class:`CampaignRecords`)
RECORD_KINDS = {"attempt": "attempts", "question": "questions", "claim": "claims", "event": "events",
                "human_question": "human_questions"}
_MODELS: dict[str, type[BaseModel]] = {
    "attempts": AttemptRecord, "questions": AskedQuestion, "claims": ClaimRecord, "events": EventRecord,
    "human_questions": HumanQuestionRecord}

log = get_logger(__name__)


class ImportedCampaign(BaseModel):
    """One campaign written into the store by :func:`import_trace`."""

    source_id: str = Field(description="the campaign's id in the trace")
    campaign_id: str = Field(description="its id in the store (differs from source_id with rename_to)")
    counts: dict[str, int] = Field(description="kind (attempts, questions, claims, events, human_questions) -> "
                                               "records imported")


class ImportResult(BaseModel):
    """What :func:`import_trace` wrote."""

    campaigns: list[ImportedCampaign]
    skipped: list[str] = Field(default_factory=list, description="campaigns of the trace with no records whose id "
                                                                 "the store already uses (nothing to import)")
    counts: dict[str, int] = Field(description="kind -> records imported, over every campaign")
    active: str = Field(description="the store's active campaign after the import")
    activated: bool = Field(description="True when the import made an imported campaign active (the store "
                                        "held no attempts before and its active campaign was still `default`)")


#: A parsed trace: campaign id -> {"campaign": its campaign record, kind: [(where, record), ...]}.
_Parsed = dict[str, dict[str, Any]]


def _new_campaign(info: dict[str, Any]) -> dict[str, Any]:
    return {"campaign": info, **{key: [] for key in RECORD_KINDS.values()}}


def _check_header(obj: dict[str, Any]) -> None:
    if obj.get("format") != TRACE_FORMAT:
        raise InputError(f"not an attnq trace (format {obj.get('format')!r}, expected {TRACE_FORMAT!r}; write one "
                         "with `attnq trace export`); nothing was imported")
    if obj.get("version") != TRACE_VERSION:
        raise InputError(f"attnq trace version {obj.get('version')!r} is not supported (this attnq reads version "
                         f"{TRACE_VERSION}); nothing was imported")


def _parse_json_form(obj: dict[str, Any]) -> _Parsed:
    _check_header(obj)
    camps = obj.get("campaigns")
    if not isinstance(camps, list):
        raise InputError("the trace has no 'campaigns' list; nothing was imported")
    per: _Parsed = {}
    for i, c in enumerate(camps):
        info = c.get("campaign") if isinstance(c, dict) else None
        cid = info.get("campaign_id") if isinstance(info, dict) else None
        if not isinstance(cid, str) or cid in per:
            raise InputError(f"trace campaigns[{i}] has {'a repeated' if cid in per else 'no'} campaign id; "
                             "nothing was imported")
        per[cid] = _new_campaign(info)  # type: ignore[arg-type]
        for key in RECORD_KINDS.values():
            recs = c.get(key, [])
            if not isinstance(recs, list):
                raise InputError(f"trace campaigns[{i}].{key} is not a list; nothing was imported")
            per[cid][key] = [(f"campaigns[{i}].{key}[{j}]", r) for j, r in enumerate(recs)]
    return per


def _parse_jsonl(lines: list[str], first: int, header: dict[str, Any]) -> _Parsed:
    """The records after the header line ``lines[first]``; errors name 1-based line numbers of the text."""
    if header.get("type") != "header":
        raise InputError("the first line of a jsonl trace must be its header ({\"type\": \"header\", \"format\": "
                         f"\"{TRACE_FORMAT}\", ...}}); nothing was imported")
    _check_header(header)
    per: _Parsed = {}
    for n, line in enumerate(lines[first + 1:], start=first + 2):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"trace line {n} is not JSON ({exc.msg} at column {exc.colno}); nothing was imported")\
                from None
        kind, cid = (rec.get("type"), rec.get("campaign_id")) if isinstance(rec, dict) else (None, None)
        if not isinstance(cid, str) or (kind != "campaign" and kind not in RECORD_KINDS):
            raise InputError(f"trace line {n} is not a trace record (type {kind!r}, campaign_id {cid!r}); "
                             "nothing was imported")
        if kind == "campaign":
            if cid in per:
                raise InputError(f"trace line {n} repeats campaign {cid!r}; nothing was imported")
            per[cid] = _new_campaign(rec)
        else:
            per.setdefault(cid, _new_campaign({"campaign_id": cid}))[RECORD_KINDS[kind]].append((f"line {n}", rec))
    return per


def read_trace(data_or_stream: dict[str, Any] | str | TextIO) -> _Parsed:
    """Parse a trace (the json dict, its text, or a text stream; json or jsonl detected) into campaign id ->
    ``{"campaign": record, "attempts": [(where, record)], ...}`` in trace order; records are not validated yet.

    Raises:
        InputError: not JSON / JSON Lines (the line is named), not an attnq trace, or another version.
    """
    if isinstance(data_or_stream, dict):
        return _parse_json_form(data_or_stream)
    text = data_or_stream if isinstance(data_or_stream, str) else data_or_stream.read()
    try:
        whole: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        whole, first_error = None, exc
    if isinstance(whole, dict) and whole.get("type") != "header":
        return _parse_json_form(whole)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise InputError("the trace is empty; nothing was imported")
    try:
        header = json.loads(lines[first])
    except json.JSONDecodeError:
        raise InputError(f"the trace is neither JSON nor JSON Lines ({first_error.msg} at line "
                         f"{first_error.lineno}); nothing was imported") from None
    if not isinstance(header, dict):
        raise InputError("not an attnq trace (the first record is not an object); nothing was imported")
    return _parse_jsonl(lines, first, header)


def _campaign_records(raw: dict[str, Any], source_id: str, target_id: str) -> CampaignRecords:
    """Validate one parsed campaign into :class:`CampaignRecords` under ``target_id``."""
    out: dict[str, list[BaseModel]] = {}
    for key, model in _MODELS.items():
        out[key] = []
        for where, rec in raw[key]:
            if not isinstance(rec, dict):
                raise InputError(f"trace {where} is not an object; nothing was imported")
            fields = {"id": 0, **{k: v for k, v in rec.items() if k != "type"}, "campaign_id": target_id}
            try:
                out[key].append(model.model_validate(fields))
            except ValidationError as exc:
                errs = exc.errors(include_url=False)
                first = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in errs[:3])
                raise InputError(f"trace {where} (a record of {key} of campaign {source_id!r}) is not valid: {first}; "
                                 "nothing was imported") from None
    seqs = [a.seq for a in out["attempts"]]  # type: ignore[attr-defined]
    if len(set(seqs)) != len(seqs) or any(s < 1 for s in seqs):
        raise InputError(f"campaign {source_id!r} in the trace has repeated or non-positive attempt numbers; "
                         "nothing was imported")
    created = raw["campaign"].get("created_at")
    if not isinstance(created, str):
        stamps = [r.created_at for recs in out.values() for r in recs]  # type: ignore[attr-defined]
        created = min(stamps) if stamps else utc_now()
    return CampaignRecords(campaign_id=target_id, created_at=created, **out)  # type: ignore[arg-type]


def import_trace(store: CampaignStore, data_or_stream: dict[str, Any] | str | TextIO, *,
                 campaign_id: str | None = None, rename_to: str | None = None) -> ImportResult:
    """Restore the campaigns of a trace (``json`` or ``jsonl``, detected) into ``store``, all or nothing.

    Args:
        store: the target store.
        data_or_stream: the trace as its json dict, its text, or a text stream.
        campaign_id: import only this campaign of the trace (default: every one).
        rename_to: import the (single or chosen) campaign under this id instead.

    A campaign of the trace that holds no records is skipped (listed in ``skipped``) when the store
    already uses its id, e.g. an unused ``default``; one the store has but never used is filled.
    Every record keeps its fields (attempts their ``seq``, status, geomean, verdict...; questions and claims
    their ``attempt_seq``) and order; scenario rows are rebuilt from the verdicts. When the store held no
    attempts and its active campaign is still ``default`` (nobody chose one), the imported campaign the trace
    marks active (else the first with attempts, else the first) becomes the store's active campaign.

    Raises:
        InputError: unreadable trace, wrong format or version, an invalid record (named by line or path), no
            such campaign, ``rename_to`` with several campaigns, a bad campaign id, or a campaign id that
            already holds records in the store. Nothing is written then.
        StoreError: a database error (nothing is written).
    """
    per = read_trace(data_or_stream)
    if campaign_id is not None and campaign_id not in per:
        raise InputError(f"no campaign {campaign_id!r} in the trace; campaigns: {', '.join(per) or 'none'}")
    chosen = [campaign_id] if campaign_id is not None else list(per)
    if not chosen:
        raise InputError("the trace holds no campaigns; nothing was imported")
    if rename_to is not None and len(chosen) != 1:
        raise InputError(f"--as renames one campaign, and the trace holds {len(chosen)} ({', '.join(chosen)}): "
                         "pick one with --campaign; nothing was imported")
    targets = {src: validate_campaign_id(rename_to if rename_to is not None else src) for src in chosen}
    records = {src: _campaign_records(per[src], src, tgt) for src, tgt in targets.items()}
    infos = {c.campaign_id: c for c in store.list_campaigns()}
    skipped = [src for src, r in records.items()
               if not any(getattr(r, key) for key in _MODELS) and not store.campaign_is_empty(r.campaign_id)]
    for src, r in records.items():
        if src not in skipped and not store.campaign_is_empty(r.campaign_id):
            i = infos.get(r.campaign_id)
            held = f" ({i.attempts} attempts, {i.questions} questions)" if i else ""
            pick = f" --campaign {src}" if len(per) > 1 else ""
            raise InputError(f"campaign {r.campaign_id!r} already exists in the store{held}; nothing was imported. "
                             f"Import it under a new id: attnq trace import FILE{pick} --as NEW_ID")
    todo = {src: r for src, r in records.items() if src not in skipped}
    activate = None
    # a fresh store takes the import as its campaign, unless someone chose the active campaign (trace use): a
    # newcomer's `attnq trace use --new exp2` then `trace import ... --as restored` kept exp2 active only by luck
    if todo and not any(i.attempts for i in infos.values()) and store.active_campaign() == DEFAULT_CAMPAIGN:
        marked = [r.campaign_id for src, r in todo.items() if per[src]["campaign"].get("active") is True]
        with_attempts = [r.campaign_id for r in todo.values() if r.attempts]
        activate = (marked or with_attempts or [r.campaign_id for r in todo.values()])[0]
    store.insert_campaigns(list(todo.values()), activate=activate)
    done = [ImportedCampaign(source_id=src, campaign_id=r.campaign_id,
                             counts={key: len(getattr(r, key)) for key in _MODELS}) for src, r in todo.items()]
    totals = {key: sum(c.counts[key] for c in done) for key in _MODELS}
    result = ImportResult(campaigns=done, skipped=skipped, counts=totals, active=store.active_campaign(),
                          activated=activate is not None)
    log.info("trace_imported", campaigns=[c.campaign_id for c in done], skipped=skipped, active=result.active, **totals)
    return result
