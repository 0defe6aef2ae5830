"""Deliberately wrong variants of the original kernel, and the scenarios each must fail.

    python scripts/wrong_kernels.py make DIR            # writes DIR/<variant>.cu for every variant below
    python scripts/wrong_kernels.py check NAME VERDICT  # exit 0 iff the verdict fails what the variant must fail

The variants are small edits of kernels/attn_original.cu, so they run at the original's speed:
- no_causal_mask: ignores `causal`. Must fail exactly the causal scenarios in which some key is masked.
- drop_last_tile: never visits keys past the last multiple of 64 (the original's key tile). Must fail
  exactly the scenarios whose seqlen_k is not a multiple of 64.
- wrong_gqa: query head h reads kv head h % num_heads_kv instead of h / (num_heads_q / num_heads_kv).
  Must fail exactly the GQA scenarios with >= 2 kv heads whose kv heads hold different values (not both
  broadcast; declared constant values are no exception: the ordinary checked draws) - written for: b22 (GQA decode, head-tagged v), values/head-tagged.
- hardcoded_scale: uses 1/sqrt(head_dim) whatever softmax_scale says. Must fail every scenario that declares
  another softmax_scale (b26); it fails most others too (later draws draw the scale), so not exactly.
- ignored_kv_strides: computes K and V strides as if dense. Must fail every scenario whose declared K or V
  layout differs from dense in a dimension that is used - written for: b27, b19, layouts; since the per-call
  draws (harness/draws.py) give undeclared scenarios padded K/V layouts too, it fails most others as well
  (run 24: 81/85 on `bugs`), so not exactly.
- log2_lse: returns lse in base 2 (the natural lse / ln 2). Must fail exactly every scenario (all have a row that
  sees a key) - written for: b25.
- unguarded_tail: loads whole tiles without the row guard (reads past seqlen_k: the next batch's rows, a
  cache's NaN slack, the NaN guard band after the tensor; P = 0 there, but 0 * NaN = NaN). Must fail exactly
  the scenarios whose seqlen_k is not a multiple of 64 - written for: b19, b28, b08, b09.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import ORIGINAL_KERNEL
from harness.layouts import differs_from_dense
from harness.scenarios import Scenario, load_suite

_DENSE_KV = [
    (f"a.{t}_{s}_stride = p->{t}_{s}_stride;", f"a.{t}_{s}_stride = {dense};  /* BUG: strides ignored */")
    for t in ("k", "v")
    for s, dense in (("batch", "(int64_t)p->seqlen_k * p->num_heads_kv * p->head_dim"),
                     ("row", "(int64_t)p->num_heads_kv * p->head_dim"), ("head", "p->head_dim"))
]

#: variant -> edits (old, new), each old text present exactly once in the original
EDITS: dict[str, list[tuple[str, str]]] = {
    "no_causal_mask": [("a.causal = p->causal ? 1 : 0;", "a.causal = 0;  /* BUG: causal ignored */")],
    "drop_last_tile": [("for (int n0 = 0; n0 < key_end; n0 += kBN) {",
                        "for (int n0 = 0; n0 < min(key_end, (a.seqlen_k / kBN) * kBN); n0 += kBN) {  /* BUG */")],
    "wrong_gqa": [("const int h_kv = h / a.group;",
                   "const int h_kv = h % (a.num_heads_q / a.group);  /* BUG: wrong GQA mapping */")],
    "hardcoded_scale": [("a.scale_log2 = p->softmax_scale * kLog2e;",
                         "a.scale_log2 = kLog2e / sqrtf(static_cast<float>(D));  /* BUG: softmax_scale ignored */")],
    "ignored_kv_strides": _DENSE_KV,
    "log2_lse": [("Ms[row] * kLn2 + logf(l)", "(Ms[row] * kLn2 + logf(l)) / kLn2 /* BUG: base-2 lse */")],
    "unguarded_tail": [("if (gr < nrows) {", "if (nrows >= 0) {  /* BUG: no tail guard */")],
}

#: variant -> name prefixes of the scenarios written for it (`check` reports how many of those it must fail did)
WRITTEN_FOR = {
    "wrong_gqa": ("b22", "head-tagged"),
    "hardcoded_scale": ("b26",),
    "ignored_kv_strides": ("b27", "b19", "kv-", "k-head", "packed", "head-major"),
    "log2_lse": ("b25",),
    "unguarded_tail": ("b19", "b28", "b08", "b09"),  # the b09 ones whose seqlen_k is not a multiple of 64
}


def _distinct_kv_heads(sc: Scenario) -> bool:
    """Whether the kv heads of ``sc`` hold different values that reach the output (v, or k through q) on some
    checked call. Declared constant values do not keep them alike: a scenario that declares inputs also gets
    checked draws on ordinary values (harness/draws.py, timed values); only a broadcast layout does."""
    lay = sc.layout

    def broadcast(name: str) -> bool:
        return lay is not None and getattr(lay, name).kind == "broadcast"

    return not broadcast("v") or not broadcast("k")


def expected_failures(name: str, scenarios: list[Scenario]) -> tuple[set[str], bool]:
    """(ids the variant must fail, whether it must fail exactly those and no others)."""
    if name == "no_causal_mask":
        return {s.id for s in scenarios if s.causal and s.visible_pairs < s.seqlen_q * s.seqlen_k}, True
    if name in ("drop_last_tile", "unguarded_tail"):
        return {s.id for s in scenarios if s.seqlen_k % 64}, True
    if name == "wrong_gqa":
        return {s.id for s in scenarios if s.num_heads_kv >= 2 and s.num_heads_q > s.num_heads_kv
                and _distinct_kv_heads(s)}, True
    if name == "hardcoded_scale":
        return {s.id for s in scenarios if s.softmax_scale is not None
                and abs(s.softmax_scale * s.head_dim**0.5 - 1) > 1e-6}, False
    if name == "ignored_kv_strides":
        return {s.id for s in scenarios if differs_from_dense(s, "k") or differs_from_dense(s, "v")}, False
    if name == "log2_lse":
        return {s.id for s in scenarios}, True
    raise KeyError(name)


def make(out_dir: Path) -> list[Path]:
    """Write every variant into ``out_dir``; raises ValueError if the original no longer has an edited line."""
    src = ORIGINAL_KERNEL.read_text()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, edits in EDITS.items():
        text = src
        for old, new in edits:
            if text.count(old) != 1:
                raise ValueError(f"{name}: the line to edit is not (exactly once) in {ORIGINAL_KERNEL}: {old!r}")
            text = text.replace(old, new)
        p = out_dir / f"{name}.cu"
        p.write_text(text.replace('#include "attn_abi.h"', f'#include "{ORIGINAL_KERNEL.parent}/attn_abi.h"'))
        paths.append(p)
    return paths


def check(name: str, verdict_path: Path) -> int:
    """Compare a verdict of variant ``name`` with what it must fail; print one line; 0 when it holds."""
    v = json.loads(verdict_path.read_text())
    suite = load_suite(v["suite"])
    ran = {r["id"] for r in v["scenarios"]}
    want, exact = expected_failures(name, [s for s in suite.scenarios if s.id in ran])
    got = {r["id"] for r in v["scenarios"] if not r["correct"]}
    kinds = sorted({f"{r['failure_kind']}[{r['check']}]" for r in v["scenarios"] if not r["correct"]})
    missed, extra = want - got, got - want
    ok = not missed and (not exact or not extra)
    written = [s.id for s in suite.scenarios if s.id in want and s.name and s.name.startswith(WRITTEN_FOR.get(name, ("-",)))]
    target = f"; the {len(written)} scenarios written for it: {len(set(written) & got)} failed" if written else ""
    print(f"{name}: {'OK' if ok else 'MISMATCH'} ({'exact' if exact else 'at least'}) — expected {len(want)} failures, "
          f"got {len(got)} ({', '.join(kinds)}){target}; missed {sorted(missed)[:3]} extra "
          f"{sorted(extra)[:3] if exact else len(extra)}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        for p in make(Path(sys.argv[2])):
            print(p)
    elif sys.argv[1:2] == ["check"]:
        raise SystemExit(check(sys.argv[2], Path(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
