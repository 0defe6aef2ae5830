"""What the source/symbol policy reports: one refused item (:class:`PolicyViolation`), an imported symbol, and the
error that names them. A leaf module, so that the scans split out of harness/policy.py (harness/source_scans.py,
harness/snapshot.py) can build violations without importing the policy's data; harness.policy re-exports all three.
"""

from __future__ import annotations

from pydantic import BaseModel

from harness.errors import PolicyError

__all__ = ["ImportedSymbol", "PolicyViolation", "raise_violations"]


class PolicyViolation(BaseModel):
    """One refused item. ``kind``: header | symbol | library | instruction | entry_point | asm_label | asm_text (a
    string the assembler would read as a refused directive, a pasted operand, ...: harness/asm_text.py) | directive
    (a line marker or system_header pragma in the candidate's own files); ``file``/``line`` for headers, directives,
    entry points, asm labels and asm text."""

    kind: str
    name: str
    reason: str
    file: str | None = None
    line: int | None = None

    def describe(self) -> str:
        """One human line naming the item (and where, for a header)."""
        where = f"{self.file}:{self.line}: " if self.file else ""
        what = {"header": "#include", "symbol": "imported symbol", "library": "linked library",
                "instruction": "host instruction", "entry_point": "call of", "asm_label": "asm label",
                "asm_text": "assembler text", "directive": "directive",
                "preprocessed": "preprocessed text of"}.get(self.kind, self.kind)
        return f"{where}{what} `{self.name}` is not allowed: {self.reason}"


class ImportedSymbol(BaseModel):
    """An undefined dynamic symbol: ``name`` (base), ``version`` (after ``@``), ``weak``."""

    name: str
    version: str | None = None
    weak: bool = False


def raise_violations(violations: list[PolicyViolation]) -> None:
    """Raise :class:`PolicyError` naming the first violation (all of them in ``details``)."""
    if not violations:
        return
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    raise PolicyError(
        "source policy: " + violations[0].describe() + more,
        details={"violations": [v.model_dump() for v in violations]},
    )
