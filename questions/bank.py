"""The question bank: reviewable data files (``questions/data/*.toml``), layered and validated.

A bank file holds ``[[question]]`` tables (TOML) or ``{"questions": [...]}`` (JSON). Each question
has a stable slug ``id``, ONE short ``text`` that leads to a measurement (never the answer), the
``triggers`` it fits, a ``layer`` and a curator's ``note`` on why it helps.

Layering (later entries override earlier ones by id): the built-in bank, questions promoted from
people's questions (campaign store), banks imported into ``<state_dir>/banks/``, ``Settings.bank_paths``
in order, then explicit ``paths``. Coverage rule (issue 4, enforced in CI by tests/test_bank.py):
every trigger is covered by >= 8 questions across >= 4 layers.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator

from harness.errors import QuestionBankError
from harness.suite_file import describe_error, not_utf8_text, suggest
from questions.text import describe_char, is_one_question, printable, unsafe_char

if TYPE_CHECKING:  # pragma: no cover
    from harness.config import Settings
    from harness.store import CampaignStore

import tomllib as _toml

Trigger = Literal["stall", "declared_limit", "declared_done", "suspicious_win", "churn"]
Layer = Literal["measurement", "memory_traffic", "pipelining", "parallelism_scheduling",
                "instruction_mix_registers", "numerics", "correctness_edge_cases", "search_strategy"]
TRIGGERS: tuple[str, ...] = get_args(Trigger)
LAYERS: tuple[str, ...] = get_args(Layer)

#: The built-in bank's directory.
BUILTIN_DIR = Path(__file__).resolve().parent / "data"
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{1,79}$")
MAX_TEXT_CHARS = 240


class Provenance(BaseModel):
    """Where a promoted question came from: the campaigns that asked it and when (ISO 8601 UTC)."""

    campaigns: list[str]
    first_asked: str
    last_asked: str
    times_asked: int


class Question(BaseModel):
    """One bank question. ``text`` is a single short question ending in ``?``."""

    id: str = Field(description="stable slug, ^[a-z0-9][a-z0-9-]*$")
    text: str
    triggers: list[Trigger] = Field(min_length=1)
    layer: Layer
    note: str = Field(default="", description="curator's note: why the question helps (not shown to agents)")
    requires: Literal["attempts", "failures", "verified"] | None = Field(
        default=None, description="state the question presupposes: 'attempts' = some attempt has been recorded "
                                  "(the question speaks of earlier attempts or edits); 'failures' = the latest "
                                  "verified attempt failed scenarios; 'verified' = some attempt has been verified "
                                  "and timed (a measurement exists)")
    origin: str = Field(default="builtin", description="builtin, promoted or the bank file it came from")
    provenance: Provenance | None = None

    @field_validator("id")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _SLUG.match(v):
            raise ValueError(f"id {v!r} is not a slug (lowercase letters, digits, '-'; 2-80 chars)")
        return v

    @field_validator("text")
    @classmethod
    def _one_question(cls, v: str) -> str:
        v = " ".join(v.split())
        if bad := [ch for ch in v if unsafe_char(ch)]:
            raise ValueError(f"text contains {describe_char(bad[0])}, a control or direction-override character")
        if not is_one_question(v):
            raise ValueError(f"text must be ONE question ending in '?': {v!r}")
        if len(v) > MAX_TEXT_CHARS:
            raise ValueError(f"text is {len(v)} chars; keep it under {MAX_TEXT_CHARS}")
        return v

    @field_validator("triggers")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate triggers {v}")
        return v


class Bank(BaseModel):
    """The effective bank: questions with unique ids, and the sources they were loaded from."""

    questions: list[Question]
    sources: list[str] = Field(default_factory=list)

    def get(self, question_id: str) -> Question:
        """The question with this id. Raises QuestionBankError when absent."""
        for q in self.questions:
            if q.id == question_id:
                return q
        raise QuestionBankError(f"no question {question_id!r} in the bank")

    def for_trigger(self, trigger: str | None) -> list[Question]:
        """Questions that fit ``trigger`` (all questions for None)."""
        return [q for q in self.questions if trigger is None or trigger in q.triggers]

    def coverage(self) -> dict[str, dict[str, int]]:
        """trigger -> layer -> number of questions."""
        out: dict[str, dict[str, int]] = {t: {} for t in TRIGGERS}
        for q in self.questions:
            for t in q.triggers:
                out[t][q.layer] = out[t].get(q.layer, 0) + 1
        return out


def _parse_file(path: Path) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise QuestionBankError(f"cannot read bank file {path}: {exc}") from exc
    if path.suffix == ".json":
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise QuestionBankError(f"{path}: invalid JSON: {exc}") from exc
        items = data.get("questions") if isinstance(data, dict) else data
    elif path.suffix == ".toml":
        try:
            data = _toml.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise QuestionBankError(f"{path}: {not_utf8_text(raw, exc)}") from exc
        except ValueError as exc:
            raise QuestionBankError(f"{path}: invalid TOML: {exc}") from exc
        items = data.get("question")
    else:
        raise QuestionBankError(f"{path}: a bank file is .toml or .json")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise QuestionBankError(f"{path}: expected a list of questions ([[question]] or {{\"questions\": [...]}})")
    return items


def load_bank_file(path: str | Path, *, origin: str | None = None) -> list[Question]:
    """Questions of one ``.toml``/``.json`` file; ids must be unique within it.

    Raises:
        QuestionBankError: unreadable file, bad syntax, a question failing the schema, duplicate ids.
    """
    p = Path(path)
    out: list[Question] = []
    seen: set[str] = set()
    for i, item in enumerate(_parse_file(p)):
        item = dict(item)
        where = f"{p}: question #{i + 1} ({item.get('id', '?')})"
        known = list(Question.model_fields)
        if unknown := [k for k in item if k not in known]:  # a typo ("txt", "trigger") must not vanish silently
            raise QuestionBankError(f"{where}: unknown key {unknown[0]!r}{suggest(unknown[0], known)}; known keys: "
                                    f"{', '.join(known)}", details={"file": str(p), "index": i})
        item.setdefault("origin", origin or p.stem)
        try:
            q = Question.model_validate(item)
        except ValidationError as exc:
            errs = exc.errors()  # every problem of the question: one fix per run is slow
            msgs = [describe_error(e)[1] for e in errs[:10]]
            more = f" (and {len(errs) - 10} more)" if len(errs) > 10 else ""
            raise QuestionBankError(f"{where}: {'; '.join(msgs)}{more}", details={"file": str(p), "index": i}) from exc
        if q.id in seen:
            raise QuestionBankError(f"{p}: duplicate question id {q.id!r}")
        seen.add(q.id)
        out.append(q)
    return out


def _bank_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".toml", ".json"))
    return [path]


def load_bank(paths: Sequence[str | Path] | None = None, *, settings: Settings | None = None,
              store: CampaignStore | None = None, builtin: bool = True) -> Bank:
    """Load the layered bank (see the module docstring); later layers override earlier ones by id.

    Args:
        paths: extra bank files or directories, applied last.
        settings: supplies ``state_dir/banks`` and ``bank_paths``.
        store: supplies promoted questions.
        builtin: include ``questions/data``.

    Raises:
        QuestionBankError: any bank file is invalid, or the result is empty.
    """
    merged: dict[str, Question] = {}
    sources: list[str] = []

    def apply(qs: list[Question], source: str) -> None:
        for q in qs:
            merged.pop(q.id, None)  # an override moves to the end, keeping file order readable
            merged[q.id] = q
        sources.append(source)

    if builtin:
        for f in _bank_files(BUILTIN_DIR):
            apply(load_bank_file(f, origin="builtin"), str(f))
    if store is not None:
        promoted = []
        for d in store.promoted():
            try:  # printable(): control characters an attnq before issue 16 let in are shown escaped
                promoted.append(Question.model_validate({**d, "text": printable(str(d.get("text", ""))),
                                                         "origin": "promoted"}))
            except ValidationError as exc:
                raise QuestionBankError(f"promoted question {d.get('id')!r} is invalid: {exc}") from exc
        apply(promoted, f"{store.path}:promoted")
    layered: list[Path] = []
    if settings is not None:
        imported = settings.state_dir / "banks"
        if imported.is_dir():
            layered += _bank_files(imported)
        layered += [Path(p) for p in settings.bank_paths]
    layered += [Path(p) for p in paths or []]
    for entry in layered:
        for f in _bank_files(entry):
            apply(load_bank_file(f), str(f))
    if not merged:
        raise QuestionBankError("the question bank is empty")
    return Bank(questions=list(merged.values()), sources=sources)


def validate_bank(bank: Bank, *, min_per_trigger: int = 8, min_layers: int = 4) -> list[str]:
    """Problems with ``bank`` (empty list = valid): duplicate ids, duplicate texts, thin coverage.

    Coverage rule from issue 4: each trigger fits >= ``min_per_trigger`` questions spread over
    >= ``min_layers`` layers.
    """
    problems: list[str] = []
    ids = [q.id for q in bank.questions]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"duplicate id {dup!r}")
    texts = [q.text.lower() for q in bank.questions]
    for dup in sorted({t for t in texts if texts.count(t) > 1}):
        problems.append(f"duplicate text {dup!r}")
    for trig, layers in bank.coverage().items():
        n = sum(layers.values())
        if n < min_per_trigger or len(layers) < min_layers:
            problems.append(f"trigger {trig!r}: {n} questions across {len(layers)} layers "
                            f"(need >= {min_per_trigger} across >= {min_layers})")
    return problems


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def dumps_toml(questions: Sequence[Question]) -> str:
    """The questions as a TOML bank file (``[[question]]`` tables; provenance as an inline table)."""
    parts = ["# attnq question bank (see docs/questions.md)\n"]
    for q in questions:
        lines = ["[[question]]", f"id = {_toml_str(q.id)}", f"text = {_toml_str(q.text)}",
                 f"triggers = [{', '.join(_toml_str(t) for t in q.triggers)}]", f"layer = {_toml_str(q.layer)}",
                 f"note = {_toml_str(q.note)}"]
        if q.requires is not None:
            lines.append(f"requires = {_toml_str(q.requires)}")
        if q.provenance is not None:
            p = q.provenance
            lines.append(f"provenance = {{ campaigns = [{', '.join(_toml_str(c) for c in p.campaigns)}], "
                         f"first_asked = {_toml_str(p.first_asked)}, last_asked = {_toml_str(p.last_asked)}, "
                         f"times_asked = {p.times_asked} }}")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def dumps_bank(bank: Bank, fmt: Literal["toml", "json"]) -> str:
    """The bank as the text of a ``.toml`` or ``.json`` bank file (what :func:`export_bank` writes)."""
    if fmt == "json":
        return json.dumps({"questions": [q.model_dump(mode="json", exclude={"origin"}, exclude_none=True)
                                         for q in bank.questions]}, indent=2, ensure_ascii=False) + "\n"
    return dumps_toml(bank.questions)


def export_bank(bank: Bank, path: str | Path, *, fmt: Literal["toml", "json"] | None = None) -> Path:
    """Write ``bank`` to ``path`` as TOML or JSON (by ``fmt`` or the suffix). Returns the path.

    Raises:
        QuestionBankError: unknown format or unwritable path.
    """
    p = Path(path)
    kind = fmt or p.suffix.lstrip(".")
    if kind not in ("toml", "json"):
        raise QuestionBankError(f"{p}: export format must be toml or json")
    text = dumps_bank(bank, kind)  # type: ignore[arg-type]
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise QuestionBankError(f"cannot write {p}: {exc}") from exc
    return p


def import_bank(path: str | Path, *, settings: Settings, replace: bool = False) -> Path:
    """Validate a bank file and copy it (as TOML) into ``<state_dir>/banks/<stem>.toml``.

    Imported banks load after the built-in and promoted questions (overriding by id). Importing the same
    questions again is a no-op; a *different* bank whose file has the same stem as an imported one is
    refused unless ``replace`` (the imported bank would be lost otherwise).

    Raises:
        QuestionBankError: the file is invalid, or a different bank of that name is imported (no ``replace``).
    """
    src = Path(path)
    qs = load_bank_file(src)
    dest = settings.state_dir / "banks" / f"{src.stem}.toml"
    if dest.is_file() and not replace:
        try:
            old_qs = load_bank_file(dest)
        except QuestionBankError:
            old_qs = None
        if old_qs is None or [q.model_dump(exclude={"origin"}) for q in old_qs] != [
                q.model_dump(exclude={"origin"}) for q in qs]:
            raise QuestionBankError(
                f"a different bank named {src.stem!r} is already imported ({dest}); rename {src.name}, or "
                f"replace it: attnq questions import --replace {shlex.quote(str(src))}")
    export_bank(Bank(questions=qs, sources=[str(src)]), dest, fmt="toml")
    load_bank_file(dest)  # round-trip check
    return dest
