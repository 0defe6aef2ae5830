"""Summarize ncu's per-SASS-line source page (PC sampling) of one kernel, or compare two.

Input: the CSV of ``ncu -i REPORT --page source --print-source sass --csv`` (gzipped or not), from a report
taken with ``--section SourceCounters`` (run 47: ``scripts/.run2.sh`` of session 12 did this for v18 and FA3).
Prints, per file: the warp instructions executed, the stall samples by reason (percent), per opcode the
instructions executed (millions) and the stall samples, and the lines with the most samples with their top
three reasons. With two files, the per-opcode table is side by side.

    python3 scripts/ncu_source_summary.py kernels/campaigns/stage2/run47_ncu_src_v18_d128_n_s8192.csv.gz \\
        kernels/campaigns/stage2/run47_ncu_src_fa3_d128_n_s8192.csv.gz

Samples are ncu's warp-state samples (``Warp Stall Sampling (All Samples)``): proportional to the time warps
spend at a line, summed over every warp, the producer's included.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def load(path: Path) -> list[dict[str, str]]:
    """The SASS lines of the CSV (row 0: kernel name, row 1: header). Raises ValueError without the columns."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2 or SAMPLES not in rows[1] or EXECUTED not in rows[1]:
        raise ValueError(f"{path}: not an ncu source page with SourceCounters (need {SAMPLES!r}, {EXECUTED!r})")
    hdr = rows[1]
    return [dict(zip(hdr, r, strict=True)) for r in rows[2:] if len(r) == len(hdr)]


def _int(d: dict[str, str], key: str) -> int:
    return int(d.get(key) or 0)


def opcode(source: str) -> str:
    """``@!P0 BRA 0x...`` -> ``BRA``; ``HGMMA.64x128x16.F32.BF16 ...`` -> ``HGMMA``."""
    parts = source.split()
    if not parts:
        return ""
    op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
    return op.split(".")[0]


def by_opcode(lines: list[dict[str, str]]) -> tuple[collections.Counter, collections.Counter]:
    """(instructions executed, stall samples) per opcode."""
    ins: collections.Counter = collections.Counter()
    smp: collections.Counter = collections.Counter()
    for d in lines:
        op = opcode(d["Source"])
        ins[op] += _int(d, EXECUTED)
        smp[op] += _int(d, SAMPLES)
    return ins, smp


def summary(path: Path, top: int) -> None:
    """Print one file's totals, stall reasons and hottest lines."""
    lines = load(path)
    reasons = [h for h in lines[0] if h.startswith("stall_") and "Not Issued" not in h] if lines else []
    total = sum(_int(d, SAMPLES) for d in lines) or 1
    print(f"== {path.name}: {len(lines)} SASS lines, {sum(_int(d, EXECUTED) for d in lines) / 1e6:.1f} M warp "
          f"instructions, {total} samples")
    agg = collections.Counter({r[6:]: sum(_int(d, r) for d in lines) for r in reasons})
    unlisted = total - sum(agg.values())  # samples under no stall_* column of the export (HGMMA lines mostly)
    print("   stall reasons: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in agg.most_common(10))
          + f"; in no stall_* column {100 * unlisted / total:.1f}%")
    for d in sorted(lines, key=lambda d: -_int(d, SAMPLES))[:top]:
        s = _int(d, SAMPLES)
        why = sorted(((_int(d, r), r[6:]) for r in reasons), reverse=True)[:3]
        rest = s - sum(_int(d, r) for r in reasons)
        print(f"   {100 * s / total:5.1f}% {d['Address'][-5:]} {d['Source'].strip()[:58]:58s} "
              f"x{_int(d, EXECUTED) / 1e3:.0f}k " + " ".join(f"{n}:{100 * v / max(s, 1):.0f}%" for v, n in why)
              + (f" no_column:{100 * rest / max(s, 1):.0f}%" if rest > 0 else ""))


def compare(paths: list[Path], rows: int) -> None:
    """Per opcode, instructions (M) and samples of each file side by side, the largest first."""
    cols = [by_opcode(load(p)) for p in paths]
    ops = sorted(set().union(*(c[0] for c in cols)), key=lambda o: -sum(c[0][o] for c in cols))
    print(f"{'opcode':12s} " + "".join(f"{p.name[:30]:>31s}" for p in paths))
    print(f"{'':12s} " + "".join(f"{'instr M / samples':>31s}" for _ in paths))
    for op in ops[:rows]:
        print(f"{op:12s} " + "".join(f"{c[0][op] / 1e6:20.1f} / {c[1][op]:8d}" for c in cols))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, nargs="+", help="one or two source-page CSVs (.csv or .csv.gz)")
    ap.add_argument("--top", type=int, default=20, help="hottest lines to print per file")
    ap.add_argument("--ops", type=int, default=30, help="opcodes in the comparison")
    args = ap.parse_args(argv)
    if len(args.csv) > 2:
        ap.error("one file, or two to compare")
    for p in args.csv:
        summary(p, args.top)
    if len(args.csv) == 2:
        compare(args.csv, args.ops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
