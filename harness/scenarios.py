"""Scenario suites: data files (harness/suites/*.toml or a user's file) expanded into scenarios.

A suite file holds ``[[grid]]`` tables (cross product of list-valued fields), ``[[scenario]]`` tables
and/or an ``[include]`` table selecting ``ids`` or ``groups`` of another suite. See full.toml's header
for the fields. Ids derive from the fields, so the same shape has the same id in every suite.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from harness.errors import InputError

SUITES_DIR = Path(__file__).resolve().parent / "suites"
HEAD_DIMS = (64, 96, 128, 192, 256)


class Scenario(BaseModel):
    """One attention-forward problem. q/o ``[batch, seqlen_q, num_heads_q, head_dim]``, k/v
    ``[batch, seqlen_k, num_heads_kv, head_dim]``, lse ``[batch, num_heads_q, seqlen_q]``."""

    group: str
    batch: int = Field(ge=1)
    seqlen_q: int = Field(ge=1)
    seqlen_k: int = Field(ge=1)
    num_heads_q: int = Field(ge=1)
    num_heads_kv: int = Field(ge=1)
    head_dim: int
    causal: bool
    dtype: Literal["bf16", "fp16"] = "bf16"

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.num_heads_q % self.num_heads_kv:
            raise ValueError(f"num_heads_q={self.num_heads_q} not divisible by num_heads_kv={self.num_heads_kv}")
        if self.head_dim % 8 or not 8 <= self.head_dim <= 256:
            raise ValueError(f"head_dim={self.head_dim} must be a multiple of 8 in 8..256")
        return self

    @property
    def id(self) -> str:
        """Stable id, e.g. ``gqa/b4-s4096-h32x8-d128-causal-bf16``."""
        s = f"s{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"sq{self.seqlen_q}-sk{self.seqlen_k}"
        h = f"h{self.num_heads_q}" if self.num_heads_q == self.num_heads_kv else f"h{self.num_heads_q}x{self.num_heads_kv}"
        c = "causal" if self.causal else "noncausal"
        return f"{self.group}/b{self.batch}-{s}-{h}-d{self.head_dim}-{c}-{self.dtype}"

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


def _expand(table: dict[str, Any], *, grid: bool) -> list[dict[str, Any]]:
    """Expand one [[grid]] (cross product) or [[scenario]] table into Scenario field dicts."""
    t = dict(table)
    pair_keys = ("batch_seqlen", "heads")
    axes: dict[str, list[Any]] = {}
    for key, value in t.items():
        if key in pair_keys:
            axes[key] = value if (grid and value and isinstance(value[0], list)) else [value]
        else:
            axes[key] = value if (grid and isinstance(value, list)) else [value]
    out = []
    keys = list(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        f = dict(zip(keys, combo, strict=True))
        if "batch_seqlen" in f:
            b, s = f.pop("batch_seqlen")
            f["batch"] = b
            f.setdefault("seqlen", s)
        if "seqlen" in f:
            s = f.pop("seqlen")
            f.setdefault("seqlen_q", s)
            f.setdefault("seqlen_k", s)
        if "heads" in f:
            f["num_heads_q"], f["num_heads_kv"] = f.pop("heads")
        if "hidden" in f:
            hidden = f.pop("hidden")
            f["num_heads_q"] = f["num_heads_kv"] = hidden // f["head_dim"]
        out.append(f)
    return out


def _resolve(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise InputError(f"suite file {p} does not exist")
        return p
    builtin = SUITES_DIR / f"{name_or_path}.toml"
    if not builtin.is_file():
        raise InputError(f"unknown suite {name_or_path!r}: use one of {', '.join(list_suites())} or a .toml path")
    return builtin


def load_suite(name_or_path: str | Path, _seen: frozenset[Path] = frozenset()) -> Suite:
    """Load a built-in suite (``quick``, ``full``, ``production``) or a suite TOML file.

    Raises:
        InputError: unknown suite, unreadable or malformed file, invalid scenario, duplicate id,
            include cycle, unknown id or group in an include.
    """
    path = _resolve(name_or_path).resolve()
    if path in _seen:
        raise InputError(f"suite include cycle through {path}")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # a suite file is UTF-8 TOML
        raise InputError(f"cannot read suite {path}: {exc}") from None
    unknown = set(data) - {"name", "description", "grid", "scenario", "include"}
    if unknown:
        raise InputError(f"suite {path.name}: unknown top-level keys {sorted(unknown)}")
    scenarios: list[Scenario] = []
    try:
        for table in data.get("grid", []):
            scenarios += [Scenario(**f) for f in _expand(table, grid=True)]
        for table in data.get("scenario", []):
            scenarios += [Scenario(**f) for f in _expand(table, grid=False)]
    except (ValidationError, TypeError, ValueError, KeyError) as exc:
        raise InputError(f"suite {path.name}: invalid scenario: {exc}") from None
    inc = data.get("include")
    if inc is not None and not (isinstance(inc, dict) and isinstance(inc.get("suite", ""), str)
                                and all(isinstance(inc.get(k, []), list) for k in ("ids", "groups"))):
        raise InputError(f"suite {path.name}: include must be a table {{ suite = NAME, ids = [...], groups = [...] }}")
    if inc:
        base = load_suite(inc.get("suite", "full"), _seen | {path})
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
    ids = [s.id for s in scenarios]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"suite {path.name}: duplicate scenario ids {dupes[:5]}")
    if not scenarios:
        raise InputError(f"suite {path.name} has no scenarios")
    return Suite(name=data.get("name", path.stem), description=data.get("description", ""), scenarios=scenarios)


def list_suites() -> list[str]:
    """Names of the built-in suites."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))
