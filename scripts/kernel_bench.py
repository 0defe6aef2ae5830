"""Kernel development bench (GPU): build variants of a candidate, check them, time them against FA3.

Not the verdict (that is `attnq verify`): a quick loop for kernel work that builds one `.cu` with several
sets of `-D` flags, checks every variant against the one fp32 reference (harness.reference) on small
shapes, then times each on the FlashAttention-3 benchmark grid (16k tokens, hidden 2048, head_dim
64/128/256, causal and not, bf16) with `triton.testing.do_bench` (median), FA3 timed in the same process
when `flash_attn_interface` is importable.

    python3 scripts/kernel_bench.py kernels/attn_fast.cu --variant base= --variant st3=-DATTN_WS_ST128=3 \
        --json $OUT/bench.json

Prints one line per variant and scenario, then geomean TFLOP/s and the geomean ratio vs FA3.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.abi import load_kernel, make_params  # noqa: E402
from harness.anchors import fa3_runner  # noqa: E402
from harness.compile import nvcc_flags  # noqa: E402
from harness.reference import attention_reference  # noqa: E402

# the FA3 benchmark grid (16k tokens, hidden 2048 -> 2048 // head_dim heads), plus head_dim 96/192 (--dims)
GRID = [(d, causal, s) for d in (64, 96, 128, 192, 256) for causal in (False, True)
        for s in (512, 1024, 2048, 4096, 8192, 16384)]
# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, dtype): odd lengths, GQA, fp16, sq != sk
CHECKS = [
    (2, 300, 300, 4, 4, 64, False, torch.bfloat16), (2, 300, 300, 4, 4, 128, True, torch.bfloat16),
    (1, 1000, 1000, 8, 2, 256, True, torch.bfloat16), (1, 777, 1234, 8, 8, 128, True, torch.float16),
    (1, 1234, 777, 8, 8, 128, True, torch.bfloat16), (4, 256, 4096, 4, 1, 64, False, torch.float16),
    (1, 2048, 2048, 16, 16, 256, False, torch.float16), (2, 129, 65, 6, 3, 128, False, torch.bfloat16),
    (2, 4096, 4096, 8, 8, 128, False, torch.bfloat16), (2, 4096, 4096, 8, 8, 64, True, torch.bfloat16),
    (2, 1500, 1500, 10, 5, 192, True, torch.bfloat16), (1, 3000, 3000, 10, 10, 192, False, torch.float16),
    # warp-specialized d128 causal / d64 with partial last row blocks (>= 132 CTAs; the ATTN_WS_TMA_O boxes
    # that cross seqlen_q), sq < sk, and sq > sk (rows without keys)
    (2, 1999, 1999, 16, 16, 128, True, torch.bfloat16), (1, 1500, 2500, 32, 32, 128, True, torch.float16),
    (1, 2500, 1500, 32, 32, 128, True, torch.bfloat16), (2, 2100, 2100, 32, 32, 64, False, torch.float16),
    # d128 non-causal (ATTN_WS_TMA_O: BN 160 with its staging), d192 / d256 (ATTN_WS_TMA_O_QBUF: O staged in Q's
    # buffer), >= 132 CTAs, partial last row blocks (sq 1050: the second consumer's rows all past seqlen_q),
    # partial last key tiles, GQA, sq < sk and sq > sk (causal rows without keys)
    (2, 1999, 1999, 16, 16, 128, False, torch.bfloat16), (1, 1500, 2500, 32, 32, 128, False, torch.float16),
    (2, 1100, 1300, 12, 6, 192, False, torch.bfloat16), (2, 1999, 1999, 8, 8, 192, True, torch.float16),
    (1, 2500, 1500, 16, 16, 192, True, torch.bfloat16), (2, 1050, 1050, 8, 8, 256, False, torch.float16),
    (2, 1999, 1999, 8, 4, 256, True, torch.bfloat16), (1, 1500, 2500, 16, 16, 256, True, torch.float16),
    # ATTN_WS_SPLIT (split-KV on the warp-specialized kernel, < 132 row tiles): chunked prefill (S 2), d128 non-causal
    # (BN 176), sq not a multiple of 64 and sk of the key tile (S 6), 3 row blocks with a partial one (S 3), sq > sk
    # (rows without keys, splits without keys: S 3), a 32-block causal head whose first block has one key tile
    # (split 0 empty), d64 (BM 192, S 4), d256 (S 4), d192 (S 8); sq128 sk640 stays unsplit (5 key tiles) unless
    # ATTN_WS_SPLIT_FORCE (then 5 splits of 1 tile; empty splits where a tile has fewer key tiles than splits)
    (2, 128, 4096, 32, 8, 128, True, torch.bfloat16), (2, 128, 4096, 32, 8, 128, False, torch.bfloat16),
    (1, 100, 3000, 8, 8, 128, True, torch.float16), (1, 300, 2000, 8, 2, 128, False, torch.bfloat16),
    (1, 2500, 1500, 4, 4, 128, True, torch.bfloat16), (1, 4096, 4096, 4, 4, 128, True, torch.float16),
    (2, 130, 4096, 16, 4, 64, True, torch.float16), (2, 128, 3000, 16, 16, 256, True, torch.bfloat16),
    (1, 200, 2500, 8, 4, 192, False, torch.bfloat16), (2, 128, 640, 32, 8, 128, True, torch.bfloat16),
    # decode, head_dim 128 (ATTN_DECODE: packed rows R = group * seqlen_q <= 32 on attn_dec): sq 1 and 4 (causal),
    # group 4 and 8, R = 4..32, seqlen_k not a multiple of its 32-key tile, short (1 split, idle warps) and long
    # (many splits), one split with many CTAs, sq > sk (rows without keys), MQA (R 8), MHA (R 1), and R > 32
    # (MQA group 16 x sq 4: stays on attn_fwd_mma)
    (1, 1, 37, 32, 8, 128, False, torch.bfloat16), (2, 4, 300, 32, 8, 128, True, torch.float16),
    (1, 4, 16384, 64, 8, 128, True, torch.bfloat16), (2, 1, 16383, 64, 8, 128, False, torch.float16),
    (64, 4, 2047, 32, 8, 128, True, torch.bfloat16), (3, 4, 1000, 16, 4, 128, True, torch.float16),
    (2, 3, 2, 8, 2, 128, True, torch.bfloat16), (1, 16, 100, 16, 8, 128, True, torch.bfloat16),
    (96, 1, 1000, 8, 1, 128, False, torch.bfloat16), (4, 1, 5000, 4, 4, 128, False, torch.float16),
    (2, 4, 500, 16, 1, 128, True, torch.bfloat16), (8, 4, 4100, 64, 8, 128, True, torch.float16),
    # head_dim 96 (ATTN_WS_D96: the d128 warp-specialized kernel over 96-column tensor maps): >= 132 row tiles,
    # causal and not, partial last row blocks and key tiles, GQA, fp16, sq < sk and sq > sk; the split path and
    # the small mma.sync path (< 1 wave) stay on their kernels
    (2, 1999, 1999, 16, 16, 96, True, torch.bfloat16), (2, 1999, 1999, 16, 8, 96, False, torch.float16),
    (1, 1500, 2500, 32, 32, 96, True, torch.float16), (1, 2500, 1500, 32, 8, 96, True, torch.bfloat16),
    (2, 4096, 4096, 16, 16, 96, False, torch.bfloat16), (2, 128, 4096, 32, 8, 96, True, torch.bfloat16),
    (2, 300, 300, 4, 4, 96, False, torch.bfloat16),
    # ATTN_WS_BN176_FROM (d128 non-causal at BN 176 from seqlen_k 4096 on): fp16, GQA, partial row and key tiles
    (1, 4100, 4500, 16, 8, 128, False, torch.float16),
]
TOL = {torch.bfloat16: (1.5e-2, 1e-2), torch.float16: (2e-3, 2e-3)}


def build(src: Path, flags: list[str], out: Path) -> Path:
    cmd = ["nvcc", *nvcc_flags("sm_90a"), *flags, str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed for {flags}:\n{proc.stderr[-3000:]}")
    regs = [ln.strip() for ln in proc.stderr.splitlines() if "attn_fwd_ws" in ln and "Compiling" in ln]
    spills = [ln.strip() for ln in proc.stderr.splitlines() if "spill" in ln and not ln.strip().startswith("0 bytes")]
    warn = [ln for ln in proc.stderr.splitlines() if "warning" in ln.lower() and "#177" not in ln]
    if spills or warn:
        print(f"  build notes {flags}: spills={spills[:4]} warnings={warn[:4]}", flush=True)
    del regs
    return out


class Runner:
    """Calls a built library on torch tensors (bhsd views of [b, s, h, d])."""

    def __init__(self, lib_path: Path) -> None:
        self.lib = load_kernel(lib_path)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def prepare(self, q, k, v, causal, scale):
        b, sq, hq, _ = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(b, hq, sq, device=q.device, dtype=torch.float32)
        p = make_params(q, k, v, o, lse, softmax_scale=scale, causal=causal, num_sms=self.sms)
        nws = self.lib.workspace_bytes(p)
        ws = torch.empty(max(nws, 1), device=q.device, dtype=torch.uint8)
        p.workspace, p.workspace_bytes = ws.data_ptr(), nws
        stream = torch.cuda.current_stream().cuda_stream

        def call():
            rc = self.lib.fwd(p, stream)
            if rc != 0:
                raise RuntimeError(f"attn_fwd returned {rc}")
        return call, o, lse, ws


def check(runner: Runner) -> list[str]:
    bad = []
    for (b, sq, sk, hq, hk, d, causal, dt) in CHECKS:
        torch.manual_seed(sq * 7 + d)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dt)
        scale = d ** -0.5
        call, o, lse, _ws = runner.prepare(q, k, v, causal, scale)
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        o_ref, lse_ref = attention_reference(q, k, v, softmax_scale=scale, causal=causal)
        atol, rtol = TOL[dt]
        err = (o.float() - o_ref).abs()
        ok_o = bool((err <= atol + rtol * o_ref.abs()).all())
        fin = torch.isfinite(lse_ref)
        ok_l = bool(torch.equal(torch.isfinite(lse), fin)) and bool(
            ((lse[fin] - lse_ref[fin]).abs() <= 1e-3 * lse_ref[fin].abs().clamp_min(1)).all())
        tag = f"b{b} sq{sq} sk{sk} h{hq}/{hk} d{d} {'causal' if causal else 'full'} {str(dt)[6:]}"
        if not (ok_o and ok_l):
            bad.append(f"{tag}: max|o-ref|={float(err.nan_to_num(1e9).max()):.3g} lse_ok={ok_l}")
    return bad


def grid_tensors(d: int, s: int):
    h = 2048 // d
    b = 16384 // s
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    return q, k, v


def shapes(suite: str | None, dims: set[int]):
    """Yield (key, head_dim, causal, (q, k, v), FLOPs) to time: the FA3 grid (keys d128_c_s512; classes d128_c)
    filtered by head_dim, or with `suite` every bf16/fp16 scenario of that harness suite with plain inputs (keys
    <group>_<scenario id without the group>: the class is the group; FLOPs as Scenario.flops counts them)."""
    if suite is None:
        for (d, causal, s) in GRID:
            if d not in dims:
                continue
            torch.manual_seed(s + d)
            q, k, v = grid_tensors(d, s)
            yield f"d{d}_{'c' if causal else 'n'}_s{s}", d, causal, (q, k, v), flops(q.shape[0], q.shape[2], s, d, causal)
        return
    from harness.scenarios import load_suite
    for sc in load_suite(suite).scenarios:
        if sc.inputs is not None or sc.layout is not None:
            continue
        dt = torch.bfloat16 if sc.dtype == "bf16" else torch.float16
        torch.manual_seed(sc.seqlen_k + sc.head_dim)
        q = torch.randn(sc.batch, sc.seqlen_q, sc.num_heads_q, sc.head_dim, device="cuda", dtype=dt)
        k, v = (torch.randn(sc.batch, sc.seqlen_k, sc.num_heads_kv, sc.head_dim, device="cuda", dtype=dt) for _ in range(2))
        yield f"{sc.group}_{sc.id.split('/', 1)[1]}", sc.head_dim, sc.causal, (q, k, v), sc.flops


def flops(b, h, s, d, causal):
    f = 4 * b * h * s * s * d
    return f / 2 if causal else f


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad arguments before any build (a typo surfaced as a traceback after minutes of nvcc)."""
    import re

    from harness.errors import AttnqError
    from harness.scenarios import load_suite

    if not args.prebuilt and not args.kernel.is_file():
        ap.error(f"no kernel file {args.kernel}")
    names = []
    for v in args.variant:
        name = v.split("=", 1)[0]
        if "=" not in v or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            ap.error(f"--variant {v!r}: use NAME=FLAGS (NAME of letters, digits, '_', '.', '-'; FLAGS may be empty)")
        if name in names:
            ap.error(f"--variant {name!r} is given twice")
        names.append(name)
    try:
        dims = {int(x) for x in args.dims.split(",") if x.strip()}
    except ValueError:
        dims = set()
    if not dims or not dims <= {d for d, _, _ in GRID}:
        ap.error(f"--dims {args.dims!r}: a comma list of 64, 96, 128, 192, 256")
    if args.check_only and args.no_check:
        ap.error("--check-only and --no-check exclude each other")
    if args.rounds < 1 or not args.rep_ms > 0:
        ap.error(f"--rounds {args.rounds} / --rep-ms {args.rep_ms}: at least one round of a positive window")
    if args.suite is not None:
        if args.one:
            ap.error("--one calls one FA3-grid scenario: not with --suite")
        if args.dims != ap.get_default("dims"):
            ap.error("--dims filters the FA3 grid: not with --suite (it times every scenario of the suite)")
        try:
            load_suite(args.suite)
        except AttnqError as err:
            ap.error(f"--suite: {err.message}")
    if args.one:
        m = re.fullmatch(r"d(\d+)_([cn])_s(\d+)", args.one)
        if m is None or (int(m[1]), m[2] == "c", int(m[3])) not in GRID:
            ap.error(f"--one {args.one!r}: one FA3-grid scenario d<head_dim>_<c|n>_s<seqlen>, e.g. d128_n_s8192 "
                     "(head_dim 64..256, seqlen 512..16384)")
    if args.calls < 1:
        ap.error("--calls must be at least 1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--variant", action="append", default=[], help="NAME=-DX=1 -DY=2 (flags separated by spaces)")
    ap.add_argument("--json", type=Path, help="write the TFLOP/s per variant and scenario here")
    ap.add_argument("--dims", default="64,128,256", help="head_dims of the FA3 grid to time (default 64,128,256; "
                    "any of 64,96,128,192,256; not with --suite)")
    ap.add_argument("--suite", help="time this harness suite's scenarios (e.g. production) instead of the FA3 grid; "
                    "classes are the scenario groups, keys the scenario ids")
    ap.add_argument("--no-fa3", action="store_true", help="do not time FlashAttention-3 even where it is installed")
    ap.add_argument("--check-only", action="store_true", help="build and check, no timing")
    ap.add_argument("--keep", type=Path, help="copy the built libraries here")
    ap.add_argument("--build-only", action="store_true", help="build the variants (and --keep them), no GPU needed")
    ap.add_argument("--no-check", action="store_true", help="time without checking first (the variants were checked "
                    "in an earlier --check-only run, as scripts/kernel_dev.sh does)")
    ap.add_argument("--prebuilt", type=Path, help="load NAME.so from this folder instead of building")
    ap.add_argument("--one", help="only call each variant (and FA3) --calls times on one grid scenario, e.g. d128_n_s8192 (for ncu)")
    ap.add_argument("--calls", type=int, default=3, help="calls per variant with --one")
    ap.add_argument("--rounds", type=int, default=1, help="time each row this many times per variant, round-robin in "
                    "a rotated order, and keep the median (drift falls on every variant alike)")
    ap.add_argument("--rep-ms", type=float, default=100.0, help="do_bench's timing window per measurement (ms)")
    args = ap.parse_args()
    check_args(ap, args)
    from triton.testing import do_bench

    variants = [v.split("=", 1) for v in (args.variant or ["base="])]
    tmp = Path(tempfile.mkdtemp())
    t0 = time.time()
    libs = {}
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=8) as pool:
        futs = {name: (pool.submit(lambda n=name: args.prebuilt / f"{n}.so") if args.prebuilt else
                       pool.submit(build, args.kernel, fl.split(), tmp / f"{name}.so")) for name, fl in variants}
        for name, fut in futs.items():
            try:
                libs[name] = fut.result()
            except RuntimeError as exc:
                print(f"[{name}] BUILD FAILED: {exc}", flush=True)
    print(f"built {len(libs)} variants in {time.time() - t0:.0f} s", flush=True)
    if args.build_only:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in libs.values():
                (args.keep / path.name).write_bytes(path.read_bytes())
        return
    fa3 = None
    if not args.no_fa3:
        try:
            import flash_attn_interface as fa3  # noqa: F401
        except ImportError as exc:
            print(f"no FA3: {exc}")
    dims = {int(x) for x in args.dims.split(",")}
    results: dict = {"fa3": {}}
    runners = {}
    for name, path in libs.items():
        runners[name] = Runner(path)
        if args.one or args.no_check:  # --one: ncu counts the first launches it matches, no check calls before
            results[name] = {}
            continue
        bad = check(runners[name])
        print(f"[{name}] check: {'OK' if not bad else 'FAILED'}", flush=True)
        for line in bad:
            print(f"   {line}", flush=True)
        results[name] = {"check_failures": bad}
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for name, path in libs.items():
            (args.keep / path.name).write_bytes(path.read_bytes())
    if args.check_only:
        return
    if args.one:
        d, c, s = args.one.split("_")
        q, k, v = grid_tensors(int(d[1:]), int(s[1:]))
        for name, r in runners.items():
            call, *_ = r.prepare(q, k, v, c == "c", int(d[1:]) ** -0.5)
            for _ in range(args.calls):
                call()
        if fa3 is not None:
            for _ in range(args.calls):
                fa3.flash_attn_func(q, k, v, softmax_scale=int(d[1:]) ** -0.5, causal=c == "c")
        torch.cuda.synchronize()
        return
    for key, d, causal, (q, k, v), fl in shapes(args.suite, dims):
        line = [key]
        # FA3 called as attnq's fa3 anchor calls it (harness.anchors.fa3_runner: num_splits=0, FA3's own split-KV
        # heuristic; flash_attn_func's default of 1 split leaves most SMs idle on decode: run 30 timed FA3 at
        # 337-363 us on b1 sk32768 decode that way, against 49 us as the anchor)
        calls = {}
        if fa3 is not None and (fa3_call := fa3_runner(torch, causal, q, k, v, d ** -0.5)) is not None:
            calls["fa3"] = fa3_call
        for name, r in runners.items():
            calls[name] = r.prepare(q, k, v, causal, d ** -0.5)[0]
        # --rounds: every caller timed once per round, the order rotated each round, the median of the rounds'
        # medians kept (a clock or power drift during the row then falls on every variant alike)
        times: dict[str, list[float]] = {name: [] for name in calls}
        errors: dict[str, str] = {}
        names = list(calls)
        for rnd in range(args.rounds):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                if name in errors:
                    continue
                try:
                    times[name].append(do_bench(calls[name], rep=args.rep_ms, return_mode="median"))
                except RuntimeError as exc:
                    errors[name] = str(exc)
        for name in names:
            if name in errors:
                line.append(f"{name} ERR {errors[name]}")
                continue
            results[name][key] = fl / statistics.median(times[name]) / 1e9
            if name == "fa3":
                line.append(f"fa3 {results['fa3'][key]:6.1f}")
            else:
                ratio = results[name][key] / results["fa3"][key] if key in results["fa3"] else float("nan")
                line.append(f"{name} {results[name][key]:6.1f} ({ratio:.2f})")
        print("  ".join(line), flush=True)
        del q, k, v, calls
    print("== geomean TFLOP/s (ratio vs fa3) per class and overall")
    for name in ["fa3", *runners]:
        vals = {k2: v2 for k2, v2 in results[name].items() if k2 != "check_failures"}
        if not vals:
            continue
        parts = []
        for cls in sorted({k2.rsplit("_", 1)[0] for k2 in vals}):
            sel = [k2 for k2 in vals if k2.rsplit("_", 1)[0] == cls]
            g = math.exp(sum(math.log(vals[k2]) for k2 in sel) / len(sel))
            rr = [vals[k2] / results["fa3"][k2] for k2 in sel if k2 in results["fa3"]]
            gr = math.exp(sum(map(math.log, rr)) / len(rr)) if rr else float("nan")
            parts.append(f"{cls} {g:.0f} ({gr:.2f})")
        g = math.exp(sum(math.log(x) for x in vals.values()) / len(vals))
        rr = [vals[k2] / results["fa3"][k2] for k2 in vals if k2 in results["fa3"]]
        gr = math.exp(sum(map(math.log, rr)) / len(rr)) if rr else float("nan")
        print(f"[{name}] ALL {g:.0f} ({gr:.3f}) | " + " | ".join(parts), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
