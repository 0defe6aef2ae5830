"""``attnq scenarios [--suite S] [--json]``: list a suite's scenarios with ids, groups, FLOPs and the
estimated peak device memory of each (the memory guard's number, harness/memory.py)."""

from __future__ import annotations

import argparse
import json

from harness.memory import DEVICE_RESERVE_BYTES, estimate_peak_bytes
from harness.scenarios import load_suite, suite_choices_text

DESCRIPTION = (
    "List a suite's scenarios, one line each: the id, the FLOPs (FlashAttention's count: 4 x batch x num_heads_q x "
    "head_dim x the (query, key) pairs each query row sees; a causal row sees only its visible keys) and the "
    "estimated peak GPU memory of a verification (attnq verify refuses a scenario that does not fit before "
    "allocating anything); declared inputs, layout, repeats and fresh_process follow on an indented line. An id "
    "reads GROUP/b<batch>-s<seqlen> (or sq<seqlen_q>-sk<seqlen_k>)-h<num_heads_q>[x<num_heads_kv> (GQA/MQA)]"
    "-d<head_dim>-causal|noncausal-bf16|fp16, then -<name>, -sc<softmax_scale> when declared, and -x<hash> for "
    "other declared fields of an unnamed scenario. Suite format: README.md (Scenarios), docs/checks.md."
)

#: An H200's memory (141 GiB, rounded down to what CUDA reports: 139.8 GiB), the largest GPU attnq is run on.
H200_BYTES = 150_110_011_392


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``attnq scenarios``."""
    p = sub.add_parser("scenarios", help="list the scenarios of a suite", description=DESCRIPTION)
    p.add_argument("--suite", default=None,
                   help=f"{suite_choices_text()} path (default: ATTNQ_SUITE or quick, as verify)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: print the suite (table or JSON); errors propagate as AttnqError."""
    if args.suite is None:
        from harness.config import Settings

        args.suite = Settings().suite
    suite = load_suite(args.suite)
    if args.json:
        rows = [{"id": s.id, **s.model_dump(exclude_none=True), "flops": s.flops,
                 "peak_bytes_estimate": estimate_peak_bytes(s).total} for s in suite.scenarios]
        print(json.dumps({"name": suite.name, "description": suite.description, "scenarios": rows}, indent=2))
        return 0
    n = len(suite.scenarios)
    about = f" — {suite.description}" if suite.description else ""
    print(f"suite {suite.name}: {n} scenario{'' if n == 1 else 's'}{about}")
    print("  groups: " + ", ".join(f"{g} {n}" for g, n in suite.groups().items()))
    room_bytes = H200_BYTES - DEVICE_RESERVE_BYTES
    too_big = 0
    for s in suite.scenarios:
        peak = estimate_peak_bytes(s).total
        too_big += peak > room_bytes
        mark = "  > H200" if peak > room_bytes else ""
        print(f"  {s.id:<72} {s.flops / 1e9:>10.2f} GFLOP  {peak / 2**30:>6.2f} GiB{mark}")
        if s.extras:
            print(f"      {describe_extras(s.extras)}")
    if too_big:
        print(f"{too_big} scenario{' needs' if too_big == 1 else 's need'} more than an H200's {H200_BYTES / 2**30:.1f} GiB "
              f"(less {DEVICE_RESERVE_BYTES / 2**30:.1f} GiB for the CUDA context and flush buffers): attnq verify "
              "refuses them against the GPU's own memory before allocating anything; shrink batch, heads or lengths")
    return 0


def describe_extras(extras: dict) -> str:
    """One line of a scenario's declared non-shape fields (Scenario.extras), e.g. ``inputs.v=head_tagged(step=2.0)
    layout.k=cache(capacity=4096) repeats=20``; a layout's defaults left out."""
    parts = []
    for key, val in extras.items():
        if not isinstance(val, dict):
            parts.append(f"{key}={json.dumps(val)}")  # TOML's spelling of scalars: true, 0.5
            continue
        for sub, spec in val.items():
            if not isinstance(spec, dict):
                parts.append(f"{key}.{sub}={json.dumps(spec)}")
                continue
            spec = dict(spec)
            head = spec.pop("dist", None) or spec.pop("kind", "?")
            if key == "layout":
                spec = {k: v for k, v in spec.items() if (k, v) not in (("pad", 8), ("fill", "nan")) and v is not None}
            args = ", ".join(f"{k}={v}" for k, v in spec.items())
            parts.append(f"{key}.{sub}={head}({args})" if args else f"{key}.{sub}={head}")
    return " ".join(parts)
