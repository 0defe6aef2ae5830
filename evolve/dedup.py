"""Near-duplicate rejection: children that cost an evaluation and cannot teach the search anything.

Two rules, applied before a child is compiled (counted in the report either way):

1. **similarity**: the child's *normalized* source (comments removed, each line's spacing collapsed,
   blank lines dropped; :func:`normalize`) is compared line by line with every known program of the
   run (difflib's ``SequenceMatcher.ratio`` over the line lists, 1.0 = identical). A ratio >= the
   threshold rejects the child (``identical`` when exactly 1.0).
2. **re-added lines**: lines the child adds relative to its parent that an ancestor *removed* (a
   line present in an ancestor's parent and absent from that ancestor) are undoing earlier steps; the
   research behind attnq measured ~30 % of added lines doing this in free agents. A child is rejected
   when at least ``min_lines`` lines are re-added and they are more than ``max_fraction`` of its added
   lines.

Pure functions over source text; the engine supplies the programs and the lineage.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_SPACES = re.compile(r"\s+")
_PUNCT_SPACE = re.compile(r"\s*([(){}\[\];,=+\-*/<>&|!?:])\s*")


def normalize(source: str) -> list[str]:
    """The source as compared for duplicates: comments removed, spacing collapsed (also around
    punctuation, so ``a=b`` and ``a = b`` match), blank lines dropped. String literals are not special."""
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), source))
    out = []
    for line in text.splitlines():
        line = _PUNCT_SPACE.sub(r"\1", _SPACES.sub(" ", line).strip())
        if line:
            out.append(line)
    return out


def norm_sha256(source: str) -> str:
    """sha256 of the normalized source (equal for sources that differ only in comments and spacing)."""
    return hashlib.sha256("\n".join(normalize(source)).encode()).hexdigest()


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """Line-level similarity of two normalized sources in [0, 1] (difflib ratio; 1.0 = identical)."""
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, list(a), list(b), autojunk=False).ratio()


def added_lines(parent: Sequence[str], child: Sequence[str]) -> list[str]:
    """Lines of ``child`` that the diff from ``parent`` marks as inserted or replacing (in order)."""
    out: list[str] = []
    sm = difflib.SequenceMatcher(None, list(parent), list(child), autojunk=False)
    for tag, _, _, j1, j2 in sm.get_opcodes():
        if tag in ("insert", "replace"):
            out.extend(child[j1:j2])
    return out


def removed_lines(parent: Sequence[str], child: Sequence[str]) -> list[str]:
    """Lines of ``parent`` that the diff to ``child`` marks as deleted or replaced."""
    out: list[str] = []
    sm = difflib.SequenceMatcher(None, list(parent), list(child), autojunk=False)
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag in ("delete", "replace"):
            out.extend(parent[i1:i2])
    return out


class DuplicateCheck(BaseModel):
    """Outcome of the near-duplicate checks for one child."""

    rejected: bool
    reason: str | None = Field(default=None, description="identical | near_duplicate | readds_removed_lines")
    similarity: float = Field(description="highest similarity to a known program")
    most_similar_id: int | None = None
    added_lines: int = Field(description="lines the child adds relative to its parent")
    readded_lines: int = Field(description="of those, lines an ancestor had removed")
    message: str = ""


def check_child(child: str, parent: str, known: Iterable[tuple[int, str]], lineage: Sequence[tuple[str, str]], *,
                threshold: float, readd_max_fraction: float | None, readd_min_lines: int) -> DuplicateCheck:
    """Apply both rules to ``child``.

    Args:
        child, parent: source texts.
        known: ``(program_id, source)`` of every program of the run (the parent included).
        lineage: ``(ancestor_parent_source, ancestor_source)`` pairs along the child's ancestry, nearest
            first (the edges whose removed lines count as "removed by an ancestor").
        threshold: similarity at or above which the child is a near duplicate (1.0: identical only).
        readd_max_fraction: reject when re-added / added exceeds this (None: never on this rule).
        readd_min_lines: ... and at least this many lines are re-added.
    """
    c, p = normalize(child), normalize(parent)
    best, best_id = -1.0, None
    c_count = Counter(c)
    for pid, src in known:
        other = normalize(src)
        # a ratio is at most 2 * |common lines (multiset)| / (|a| + |b|): skip what cannot beat the best
        common = sum((c_count & Counter(other)).values())
        if c and other and 2.0 * common / (len(c) + len(other)) <= best:
            continue
        s = similarity(c, other)
        if s > best:
            best, best_id = s, pid
        if best >= 1.0:
            break
    added = added_lines(p, c)
    removed_before: set[str] = set()
    for anc_parent, anc in lineage:
        removed_before.update(removed_lines(normalize(anc_parent), normalize(anc)))
    readded = [ln for ln in added if ln in removed_before]
    best = max(best, 0.0)
    out = DuplicateCheck(rejected=False, similarity=round(best, 6), most_similar_id=best_id,
                         added_lines=len(added), readded_lines=len(readded))
    if best >= 1.0:
        out.rejected, out.reason = True, "identical"
        out.message = f"identical (after normalization) to program #{best_id}"
    elif best >= threshold:
        out.rejected, out.reason = True, "near_duplicate"
        out.message = f"{best:.4f} similar to program #{best_id} (threshold {threshold:g})"
    elif (readd_max_fraction is not None and len(readded) >= readd_min_lines and added
          and len(readded) / len(added) > readd_max_fraction):
        out.rejected, out.reason = True, "readds_removed_lines"
        out.message = (f"{len(readded)} of its {len(added)} added lines re-add lines an ancestor removed "
                       f"(> {readd_max_fraction:.0%})")
    return out
