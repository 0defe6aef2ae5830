"""Deliberately wrong variants of the original kernel, and the scenarios each must fail.

    python scripts/wrong_kernels.py make DIR            # writes DIR/no_causal_mask.cu, DIR/drop_last_tile.cu
    python scripts/wrong_kernels.py check NAME VERDICT  # exit 0 iff the verdict fails exactly the expected ids

The variants are one-line edits of kernels/attn_original.cu, so they run at the original's speed:
- no_causal_mask: ignores `causal`. Must fail exactly the causal scenarios in which some key is masked.
- drop_last_tile: never visits keys past the last multiple of 64 (the original's key tile). Must fail
  exactly the scenarios whose seqlen_k is not a multiple of 64.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import ORIGINAL_KERNEL  # noqa: E402
from harness.scenarios import Scenario, load_suite  # noqa: E402

EDITS = {
    "no_causal_mask": ("a.causal = p->causal ? 1 : 0;", "a.causal = 0;  /* BUG: causal ignored */"),
    "drop_last_tile": ("for (int n0 = 0; n0 < key_end; n0 += kBN) {",
                       "for (int n0 = 0; n0 < min(key_end, (a.seqlen_k / kBN) * kBN); n0 += kBN) {  /* BUG */"),
}


def expected_failures(name: str, scenarios: list[Scenario]) -> set[str]:
    """Ids a variant must fail (and no others)."""
    if name == "no_causal_mask":
        return {s.id for s in scenarios if s.causal and s.visible_pairs < s.seqlen_q * s.seqlen_k}
    if name == "drop_last_tile":
        return {s.id for s in scenarios if s.seqlen_k % 64}
    raise KeyError(name)


def make(out_dir: Path) -> list[Path]:
    """Write every variant into ``out_dir``; raises ValueError if the original no longer has the edited line."""
    src = ORIGINAL_KERNEL.read_text()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (old, new) in EDITS.items():
        if src.count(old) != 1:
            raise ValueError(f"{name}: the line to edit is not (exactly once) in {ORIGINAL_KERNEL}: {old!r}")
        p = out_dir / f"{name}.cu"
        p.write_text(src.replace(old, new).replace('#include "attn_abi.h"', f'#include "{ORIGINAL_KERNEL.parent}/attn_abi.h"'))
        paths.append(p)
    return paths


def check(name: str, verdict_path: Path) -> int:
    v = json.loads(verdict_path.read_text())
    suite = load_suite(v["suite"])
    ran = {r["id"] for r in v["scenarios"]}
    want = expected_failures(name, [s for s in suite.scenarios if s.id in ran])
    got = {r["id"] for r in v["scenarios"] if not r["correct"]}
    kinds = sorted({f"{r['failure_kind']}[{r['check']}]" for r in v["scenarios"] if not r["correct"]})
    ok = got == want
    print(f"{name}: {'EXACT' if ok else 'MISMATCH'} — expected {len(want)} failures, got {len(got)} ({', '.join(kinds)}); "
          f"missed {sorted(want - got)[:3]} extra {sorted(got - want)[:3]}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        for p in make(Path(sys.argv[2])):
            print(p)
    elif sys.argv[1:2] == ["check"]:
        raise SystemExit(check(sys.argv[2], Path(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
