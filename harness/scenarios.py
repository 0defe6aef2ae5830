"""Scenario suites: data files (harness/suites/*.toml or a user's file) expanded into scenarios.

A suite file holds ``[[grid]]`` tables (cross product of list-valued fields), ``[[scenario]]`` tables
and/or an ``[include]`` table selecting ``ids`` or ``groups`` of another suite. See full.toml's header
and docs/checks.md ("Scenario fields") for the fields. Ids derive from the fields, so the same scenario
has the same id in every suite. Unknown keys, invalid values and scenarios the original kernel cannot run
are refused when the suite loads, naming the file and line.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import InputError


def keys_seen(i: int, seqlen_q: int, seqlen_k: int, causal: bool) -> int:
    """Keys query row ``i`` sees: all ``seqlen_k``, or bottom-right causal
    ``min(seqlen_k, max(0, i + seqlen_k - seqlen_q + 1))``. Never decreases with ``i``."""
    if not causal:
        return seqlen_k
    return min(seqlen_k, max(0, i + seqlen_k - seqlen_q + 1))

from harness.inputs import DIST_NAMES, InputsSpec, fp32_range_problems
from harness.layouts import LayoutSpec
from harness.suite_file import SuiteText, describe_error, not_utf8_text, suggest

SUITES_DIR = Path(__file__).resolve().parent / "suites"
HEAD_DIMS = (64, 96, 128, 192, 256)


def no_key_rows(sc: Scenario) -> int:
    """How many query rows of ``sc`` see no key (their lse is +inf, their o 0: kernels/attn_abi.h). They are
    the first rows, since :func:`keys_seen` never decreases with the row: ``seqlen_q - seqlen_k`` when causal
    with ``seqlen_q > seqlen_k`` (bottom-right aligned), else none."""
    lo, hi = 0, sc.seqlen_q  # binary search for the first row that sees a key
    while lo < hi:
        mid = (lo + hi) // 2
        if keys_seen(mid, sc.seqlen_q, sc.seqlen_k, sc.causal) == 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Scenario(BaseModel):
    """One attention-forward problem. q/o ``[batch, seqlen_q, num_heads_q, head_dim]``, k/v
    ``[batch, seqlen_k, num_heads_kv, head_dim]``, lse ``[batch, num_heads_q, seqlen_q]``.

    Beyond the shape a scenario may fix what bug reports need (each optional; docs/checks.md, "Scenario
    fields"): ``softmax_scale`` (default 1/sqrt(head_dim), drawn in [0.5, 1.5] x that on later draws),
    ``inputs`` (value distributions per tensor, harness/inputs.py), ``layout`` (strides and storage,
    harness/layouts.py), ``repeats`` (one more than the determinism repeats: each replays an earlier call's
    inputs and must reproduce its bits, harness/repeats.py), ``fresh_process``
    (the scenario's first call is the candidate's first call in a new worker process) and ``name`` (a
    suffix of the id).
    """

    model_config = ConfigDict(extra="forbid")

    group: str
    batch: int = Field(ge=1)
    seqlen_q: int = Field(ge=1)
    seqlen_k: int = Field(ge=1)
    num_heads_q: int = Field(ge=1)
    num_heads_kv: int = Field(ge=1)
    head_dim: int
    causal: bool
    dtype: Literal["bf16", "fp16"] = "bf16"
    softmax_scale: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    inputs: InputsSpec | None = None
    layout: LayoutSpec | None = None
    repeats: int = Field(default=2, ge=2, le=100, description="determinism: repeats - 1 repeats (at least the job's), "
                         "each of an earlier call's inputs, bit-identical to it")
    fresh_process: bool = False
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.+-]{1,48}$")

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.num_heads_q % self.num_heads_kv:
            raise ValueError(f"num_heads_q={self.num_heads_q} not divisible by num_heads_kv={self.num_heads_kv}")
        if self.head_dim % 8 or not 8 <= self.head_dim <= 256:
            raise ValueError(f"head_dim={self.head_dim} must be a multiple of 8 in 8..256")
        problems = (self.inputs.problems(self) if self.inputs else []) + (self.layout.problems(self) if self.layout else [])
        if not problems:  # within each dtype's range, the products can still overflow fp32
            problems = fp32_range_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def extras(self) -> dict[str, Any]:
        """The non-shape fields that differ from their defaults (JSON-ready): part of the id."""
        return self.model_dump(mode="json", include=set(EXTRA_FIELDS), exclude_defaults=True)

    @property
    def id(self) -> str:
        """Stable id, e.g. ``gqa/b4-s4096-h32x8-d128-causal-bf16``, then ``-<name>`` when named, ``-sc<scale>``
        for a declared softmax_scale, and for other extra fields of an unnamed scenario ``-x<8 hex digits of
        their hash>`` (a named one stands for them: two with the same shape, name and scale are duplicates)."""
        s = f"s{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"sq{self.seqlen_q}-sk{self.seqlen_k}"
        h = f"h{self.num_heads_q}" if self.num_heads_q == self.num_heads_kv else f"h{self.num_heads_q}x{self.num_heads_kv}"
        c = "causal" if self.causal else "noncausal"
        out = f"{self.group}/b{self.batch}-{s}-{h}-d{self.head_dim}-{c}-{self.dtype}"
        if self.name:
            out += f"-{self.name}"
        if self.softmax_scale is not None:
            out += f"-sc{self.softmax_scale:g}"
        other = {k: v for k, v in self.extras.items() if k != "softmax_scale"}
        if other and not self.name:
            out += "-x" + hashlib.sha256(json.dumps(other, sort_keys=True).encode()).hexdigest()[:8]
        return out

    @property
    def scale(self) -> float:
        """The softmax_scale of draw 0: the declared one, else 1/sqrt(head_dim)."""
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)

    def visible_keys(self, i: int) -> int:
        """Keys query row ``i`` sees (:func:`keys_seen`)."""
        return keys_seen(i, self.seqlen_q, self.seqlen_k, self.causal)

    @property
    def visible_pairs(self) -> int:
        """(query, key) pairs a query attends to, per (batch, head); bottom-right causal counts only visible ones."""
        sq, sk = self.seqlen_q, self.seqlen_k
        if not self.causal:
            return sq * sk
        # query i sees keys j <= i + sk - sq, i.e. min(sk, max(0, i + sk - sq + 1)) keys
        lo = max(0, sq - sk)  # rows i < lo see no key (i + sk - sq + 1 <= 0)
        n = sq - lo  # rows lo..sq-1 see i + sk - sq + 1 keys (never more than sk, as i <= sq - 1)
        first = lo + sk - sq + 1
        return n * first + n * (n - 1) // 2

    @property
    def flops(self) -> float:
        """FLOPs per call as FlashAttention's benchmarks count them: 4 * batch * num_heads_q * pairs * head_dim."""
        return 4.0 * self.batch * self.num_heads_q * self.visible_pairs * self.head_dim

    @property
    def bytes_min(self) -> int:
        """Fewest bytes a call must move: q, k, v read once, o written once (2 bytes each), lse (4 bytes)."""
        qo = 2 * self.batch * self.seqlen_q * self.num_heads_q * self.head_dim * 2
        kv = 2 * self.batch * self.seqlen_k * self.num_heads_kv * self.head_dim * 2
        return qo + kv + 4 * self.batch * self.num_heads_q * self.seqlen_q


#: The suite the goal is judged on (harness.verify.VerifyOptions.goal_suite; questions.triggers.check_goal).
GOAL_SUITE = "full"

#: Fields beyond the shape (they change the id when set).
EXTRA_FIELDS = ("softmax_scale", "inputs", "layout", "repeats", "fresh_process")
#: Keys a [[grid]] / [[scenario]] table may hold: the Scenario fields and the shorthands of _expand.
TABLE_KEYS = ("group", "batch", "seqlen", "seqlen_q", "seqlen_k", "batch_seqlen", "heads", "hidden", "num_heads_q",
              "num_heads_kv", "head_dim", "causal", "dtype", "softmax_scale", "inputs", "layout", "repeats",
              "fresh_process", "name")
#: Grid limits of the original kernel (kernels/attn_original.cu returns 2 beyond them).
ORIGINAL_MAX_BATCH = 65535
ORIGINAL_MAX_HEADS = 65535


def original_refusals(sc: Scenario) -> list[str]:
    """Why the original kernel cannot run ``sc`` (empty when it can): such a scenario would fail every
    candidate, since correctness is judged against the original's error. Source: attn_fwd's checks in
    kernels/attn_original.cu (head_dim 64/96/128/192/256; batch in gridDim.z and num_heads_q in gridDim.y,
    at most 65535 each)."""
    out = []
    if sc.head_dim not in HEAD_DIMS:
        out.append(f"head_dim={sc.head_dim}: the original kernel supports only {', '.join(map(str, HEAD_DIMS))}")
    if sc.batch > ORIGINAL_MAX_BATCH:
        out.append(f"batch={sc.batch}: the original kernel puts batch in gridDim.z (at most {ORIGINAL_MAX_BATCH})")
    if sc.num_heads_q > ORIGINAL_MAX_HEADS:
        out.append(f"num_heads_q={sc.num_heads_q}: the original kernel puts heads in gridDim.y (at most {ORIGINAL_MAX_HEADS})")
    return out


class Suite(BaseModel):
    """A named, ordered list of scenarios with unique ids."""

    name: str
    description: str = ""
    scenarios: list[Scenario]

    def ids(self) -> list[str]:
        return [s.id for s in self.scenarios]

    def groups(self) -> dict[str, int]:
        """Scenario count per group, in first-seen order."""
        out: dict[str, int] = {}
        for s in self.scenarios:
            out[s.group] = out.get(s.group, 0) + 1
        return out


class _ExpandError(ValueError):
    """A table whose shape keys cannot be expanded; ``key`` is the key to point at (its line)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


_PAIR_HELP = {"heads": "[num_heads_q, num_heads_kv], e.g. heads = [8, 8] (MHA) or [32, 8] (GQA)",
              "batch_seqlen": "[batch, seqlen], e.g. batch_seqlen = [2, 4096]"}


def _pair(key: str, value: Any) -> tuple[Any, Any]:
    """One two-element pair of a ``heads`` / ``batch_seqlen`` key, or _ExpandError saying what it must be."""
    if not isinstance(value, list) or len(value) != 2 or any(isinstance(v, list) for v in value):
        raise _ExpandError(key, f"{key} must be {_PAIR_HELP[key]}; got {value!r}")
    return value[0], value[1]


def _expand(table: dict[str, Any], *, grid: bool) -> list[dict[str, Any]]:
    """Expand one [[grid]] (cross product) or [[scenario]] table into Scenario field dicts.

    Raises _ExpandError (naming the key) for a malformed pair key, an empty grid axis, or ``hidden``
    without ``head_dim``."""
    t = dict(table)
    pair_keys = ("batch_seqlen", "heads")
    axes: dict[str, list[Any]] = {}
    for key, value in t.items():
        if key in pair_keys:
            axes[key] = value if (grid and value and isinstance(value, list) and isinstance(value[0], list)) \
                else [value]
        elif isinstance(value, list) and not grid:
            raise _ExpandError(key, f"{key} = {value!r}: a list expands only in a [[grid]] table (one scenario per "
                                    "value); a [[scenario]] takes one value")
        else:
            axes[key] = value if (grid and isinstance(value, list)) else [value]
        if not axes[key]:
            raise _ExpandError(key, f"{key} is an empty list: this [[grid]] would have no scenarios")
    out = []
    keys = list(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        f = dict(zip(keys, combo, strict=True))
        if "batch_seqlen" in f:
            b, s = _pair("batch_seqlen", f.pop("batch_seqlen"))
            f["batch"] = b
            f.setdefault("seqlen", s)
        if "seqlen" in f:  # a shorthand: seqlen_q / seqlen_k given beside it override it (production: seqlen_q = 1)
            s = f.pop("seqlen")
            f.setdefault("seqlen_q", s)
            f.setdefault("seqlen_k", s)
        if "heads" in f:
            f["num_heads_q"], f["num_heads_kv"] = _pair("heads", f.pop("heads"))
        if "hidden" in f:
            hidden = f.pop("hidden")
            if "head_dim" not in f:
                raise _ExpandError("hidden", "hidden needs head_dim (the heads are hidden / head_dim)")
            if not isinstance(hidden, int) or isinstance(hidden, bool) or not isinstance(f["head_dim"], int) \
                    or isinstance(f["head_dim"], bool) or f["head_dim"] <= 0 or hidden % f["head_dim"]:
                raise _ExpandError("hidden", f"hidden must be an integer multiple of head_dim; got hidden={hidden!r}, "
                                             f"head_dim={f['head_dim']!r}")
            f["num_heads_q"] = f["num_heads_kv"] = hidden // f["head_dim"]
        out.append(f)
    return out


def _resolve(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if p.is_dir():
            raise InputError(f"suite {p} is a directory: give a suite name ({', '.join(list_suites())}) or a .toml file")
        if not p.is_file():
            raise InputError(f"suite file {p} does not exist")
        if p.suffix != ".toml":
            raise InputError(f"suite file {p} is not a .toml file (suites are TOML: docs/checks.md has the format)")
        return p
    builtin = SUITES_DIR / f"{name_or_path}.toml"
    if not builtin.is_file():
        raise InputError(f"unknown suite {name_or_path!r}: use one of {', '.join(list_suites())} or a .toml path")
    return builtin


def _file_order(where: SuiteText, data: dict[str, Any]) -> list[tuple[str, int]]:
    """``(kind, index)`` of every [[grid]] and [[scenario]] table in the order they appear in the file."""
    counts = {"grid": len(data.get("grid", [])), "scenario": len(data.get("scenario", []))}
    seen = {"grid": 0, "scenario": 0}
    out = []
    for _, name, is_array in where.headers:
        if is_array and name in seen and seen[name] < counts[name]:
            out.append((name, seen[name]))
            seen[name] += 1
    for kind, n in counts.items():  # tables the header scan missed (none in a well-formed file)
        out += [(kind, i) for i in range(seen[kind], n)]
    return out


#: TOML's names of the value types tomllib returns, for error messages
_TOML_TYPES = {"int": "integer", "bool": "boolean", "list": "array", "dict": "table", "datetime": "date-time",
               "date": "date", "time": "time", "float": "float"}


#: Keys a field may be written as in a table (the shorthands :func:`_expand` expands).
_SPELLED_AS = {"num_heads_q": ("heads", "hidden"), "num_heads_kv": ("heads", "hidden"),
               "seqlen_q": ("seqlen", "batch_seqlen"), "seqlen_k": ("seqlen", "batch_seqlen"), "batch": ("batch_seqlen",)}


def _keys_of_message(msg: str) -> list[str]:
    """The key path a scenario-level message is about, for its line: ``inputs.v: ...`` -> inputs, v;
    ``inputs: ...`` or ``layout packed_qkv ...`` -> inputs / layout; ``num_heads_q=28 not divisible ...`` ->
    num_heads_q; else none."""
    m = re.match(r"(inputs|layout)(?:\.(\w+))?\b", msg) or re.match(r"(\w+)=", msg)
    return [k for k in m.groups() if k] if m else []


def load_suite(name_or_path: str | Path, _seen: frozenset[Path] = frozenset()) -> Suite:
    """Load a built-in suite (``quick``, ``full``, ``production``, ``bugs``) or a suite TOML file.

    Raises:
        InputError: unknown suite, unreadable or malformed file, an unknown key (named with its file and
            line), an invalid scenario (file and line), a scenario the original kernel cannot run, a
            duplicate id, an include cycle, an unknown id or group in an include.
    """
    path = _resolve(name_or_path).resolve()
    if path in _seen:
        raise InputError(f"suite include cycle through {path}")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read suite {path}: {not_utf8_text(raw, exc)}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read suite {path}: {exc}") from None
    where = SuiteText(text)

    def fail(kind: str, index: int, keys: list[str], msg: str) -> InputError:
        line = header = where.line_of(kind, index, [])
        for ks in (keys, *[[k] for k in _SPELLED_AS.get(keys[0] if keys else "", ())]):  # heads = [...] sets num_heads_q
            line = where.line_of(kind, index, ks)
            if line != header:
                break
        at = f" line {line}" if line else ""
        table = f"[{kind}]" if kind == "include" else f"[[{kind}]] #{index + 1}"
        return InputError(f"suite {path.name}{at}: {table}: {msg}")

    def top_at(key: str) -> str:
        lines = [str(i + 1) for i, line in enumerate(where.lines) if line.split("=")[0].strip() == key]
        return f" line {lines[0]}" if lines else ""

    unknown = sorted(set(data) - {"name", "description", "grid", "scenario", "include"})
    if unknown:
        raise InputError(f"suite {path.name}{top_at(unknown[0])}: unknown top-level key {unknown[0]!r}"
                         f"{suggest(unknown[0], ('name', 'description', 'grid', 'scenario', 'include'))}; "
                         "known: name, description, [[grid]], [[scenario]], [include]")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError(f"suite {path.name}{top_at(key)}: {key} must be a string "
                             f"(in quotes), not a TOML {_TOML_TYPES.get(type(data[key]).__name__, type(data[key]).__name__)}")
    scenarios: list[Scenario] = []
    for kind in ("grid", "scenario"):
        entries = data.get(kind, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise InputError(f"suite {path.name}: {kind} must be an array of tables ([[{kind}]])")
    for kind, index in _file_order(where, data):
        table = data[kind][index]
        for key in table:
            if key not in TABLE_KEYS:
                raise fail(kind, index, [key], f"unknown key {key!r}{suggest(key, TABLE_KEYS)}; known keys: "
                                               f"{', '.join(TABLE_KEYS)}")
        try:
            fields = _expand(table, grid=kind == "grid")
        except _ExpandError as exc:
            raise fail(kind, index, [exc.key], str(exc)) from None
        except (TypeError, ValueError, KeyError) as exc:  # a shape no check above foresaw: still one plain line
            raise fail(kind, index, [], f"cannot expand this table into scenarios ({type(exc).__name__}: {exc}); "
                                        "see the [[grid]] / [[scenario]] example in docs/checks.md") from None
        for f in fields:
            try:  # strict: TOML has its own types, and "no" or 1 must not pass for a bool, "4" or 4.0 for an int
                sc = Scenario.model_validate(f, strict=True)
            except ValidationError as exc:
                errs = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")  # unknown keys first
                keys, msg = describe_error(errs[0], DIST_NAMES)
                keys = keys or _keys_of_message(msg)  # a check over several fields: the line of the one it names
                rest = [describe_error(e, DIST_NAMES)[1] for e in errs[1:4]]  # all of them: one fix per run is slow
                more = f" (and {len(errs) - 4} more)" if len(errs) > 4 else ""
                raise fail(kind, index, keys, f"invalid scenario: {'; '.join([msg, *rest])}{more}") from None
            refused = original_refusals(sc)
            if refused:
                raise fail(kind, index, ["head_dim" if "head_dim" in refused[0] else refused[0].split("=")[0]],
                           f"{sc.id}: {'; '.join(refused)}, so every candidate would fail this scenario: "
                           "change it or drop it")
            scenarios.append(sc)
    inc = data.get("include")
    if inc is not None and not (isinstance(inc, dict) and isinstance(inc.get("suite", ""), str)
                                and all(isinstance(inc.get(k, []), list) for k in ("ids", "groups"))):
        raise InputError(f"suite {path.name}: include must be a table {{ suite = NAME, ids = [...], groups = [...] }}")
    if inc is not None:
        for key in inc:
            if key not in ("suite", "ids", "groups"):
                raise fail("include", 0, [key], f"unknown key {key!r}{suggest(key, ('suite', 'ids', 'groups'))}; "
                                                "known keys: suite, ids, groups")
        target = inc.get("suite", "full")
        beside = path.parent / target  # a suite file named relative to the including file, wherever attnq runs from
        if beside.suffix == ".toml" and beside.is_file():
            target = str(beside)
        elif Path(target).suffix == ".toml" and not Path(target).is_file():
            raise fail("include", 0, ["suite"], f"suite file {target!r} not found (looked beside {path.name}: {beside}, "
                                                f"and from the current directory: {Path(target).resolve()})")
        base = load_suite(target, _seen | {path})
        if not inc.get("ids") and not inc.get("groups"):
            raise fail("include", 0, ["suite"], f"selects nothing from suite {base.name}: add ids = [...] or groups = "
                                                f"[...] (its groups: {', '.join(base.groups())})")
        by_id = {s.id: s for s in base.scenarios}
        for sid in inc.get("ids", []):
            if sid not in by_id:
                raise InputError(f"suite {path.name}: id {sid!r} is not in suite {base.name}")
            scenarios.append(by_id[sid])
        groups = inc.get("groups", [])
        missing = set(groups) - set(base.groups())
        if missing:
            raise InputError(f"suite {path.name}: groups {sorted(missing)} are not in suite {base.name}")
        scenarios += [s for s in base.scenarios if s.group in groups]
    seen: set[str] = set()
    dupes = sorted({i for i in (s.id for s in scenarios) if i in seen or seen.add(i)})
    if dupes:
        raise InputError(f"suite {path.name}: duplicate scenario ids {dupes[:5]} (give scenarios that share a "
                         "shape distinct `name`s)")
    if not scenarios:
        raise InputError(f"suite {path.name} has no scenarios")
    return Suite(name=data.get("name", path.stem), description=data.get("description", ""), scenarios=scenarios)


def list_suites() -> list[str]:
    """Names of the built-in suites."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def suite_choices_text(sep: str = ", ", last: str = " or ") -> str:
    """The built-in suite names (from harness/suites/, so help texts never lag a new suite) and the
    alternative a user has, e.g. ``quick, full, production, bugs or a suite .toml``: the inner-loop and
    goal suites first, the rest in name order."""
    first = [n for n in ("quick", "full", "production") if n in list_suites()]
    names = first + [n for n in list_suites() if n not in first]
    return f"{sep.join(names)}{last}a suite .toml"
