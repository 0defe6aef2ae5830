"""Regenerate the recorded campaign fixtures in this directory (``python tests/data/campaigns/make_fixtures.py``).

Each fixture is a replayable attempt history: ``{"name", "description", "goal_speedup",
"attempts": [{"source_path", "source_text", "compile_result", "verdict", "error"}]}``. Verdicts are
built with the real pydantic models (harness/verdict.py) for a 12-scenario quick-suite-like set on an
H200 (132 SMs; physical bf16 dense peak 132 x 4096 FLOP/clk x 1.98 GHz = 1070 TFLOP/s; measured
matmul peak ~760 TFLOP/s). Original-kernel times come from a naive FA2-style kernel (~40-55 % of the
measured peak on large shapes). Per-scenario speedups are the attempt's geomean times a fixed
per-scenario profile, so the recorded geomean equals ``harness.verdict.geomean`` of the scenarios.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from harness.verdict import ErrorStats, Flag, Goal, ScenarioResult, TimingStats, Verdict, geomean

HERE = Path(__file__).resolve().parent
PHYSICAL_PEAK_TFLOPS = 1070.0
MEASURED_PEAK_TFLOPS = 760.0
ORIGINAL_SHA = hashlib.sha256(b"kernels/attn_original.cu").hexdigest()

# id, group, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, original TFLOP/s, profile
SCENARIOS: list[tuple[str, str, int, int, int, int, int, int, bool, float, float]] = [
    ("mha_b4_h16_s1024_d128", "mha", 4, 1024, 1024, 16, 16, 128, False, 240.0, 1.00),
    ("mha_b2_h16_s4096_d128", "mha", 2, 4096, 4096, 16, 16, 128, False, 330.0, 1.08),
    ("mha_b1_h32_s8192_d64", "mha", 1, 8192, 8192, 32, 32, 64, False, 280.0, 1.02),
    ("causal_b4_h16_s1024_d128", "causal", 4, 1024, 1024, 16, 16, 128, True, 150.0, 0.92),
    ("causal_b2_h16_s4096_d128", "causal", 2, 4096, 4096, 16, 16, 128, True, 210.0, 1.05),
    ("causal_b1_h16_s8192_d128", "causal", 1, 8192, 8192, 16, 16, 128, True, 230.0, 1.10),
    ("gqa_b2_hq32_hkv8_s2048_d128", "gqa", 2, 2048, 2048, 32, 8, 128, False, 290.0, 1.04),
    ("gqa_b1_hq64_hkv8_s4096_d128", "gqa", 1, 4096, 4096, 64, 8, 128, True, 220.0, 1.06),
    ("mqa_b4_hq16_hkv1_s2048_d64", "gqa", 4, 2048, 2048, 16, 1, 64, False, 200.0, 0.97),
    ("decode_b8_hq32_hkv8_q1_k4096_d128", "decode", 8, 1, 4096, 32, 8, 128, False, 4.0, 0.88),
    ("decode_b16_hq32_hkv4_q1_k8192_d128", "decode", 16, 1, 8192, 32, 4, 128, False, 5.0, 0.90),
    ("ragged_b2_h16_q1000_k1337_d128", "ragged", 2, 1000, 1337, 16, 16, 128, True, 170.0, 0.99),
]
_PROFILE_GM = geomean(s[10] for s in SCENARIOS)


def flops(b: int, sq: int, sk: int, hq: int, d: int, causal: bool) -> float:
    """FlashAttention's forward count: 4 * b * hq * sq * sk * d, causal counting visible pairs only."""
    if not causal:
        return 4.0 * b * hq * sq * sk * d
    off = sk - sq
    pairs = sum(max(0, min(sk, i + off + 1)) for i in range(sq))
    return 4.0 * b * hq * pairs * d


def verdict(kernel: str, source: str, gm: float, *, attempt: int, goal: float = 1.0,
            override: dict[str, float] | None = None, fail: dict[str, str] | None = None,
            flags: list[Flag] | None = None, status_error: str | None = None) -> Verdict:
    """A Verdict whose correct scenarios have speedups ``gm * profile / geomean(profile)`` (or ``override``)."""
    override, fail = override or {}, fail or {}
    results: list[ScenarioResult] = []
    for idx, (sid, grp, b, sq, sk, hq, _hkv, d, causal, orig_tf, prof) in enumerate(SCENARIOS):
        f = flops(b, sq, sk, hq, d, causal)
        orig_ms = f / (orig_tf * 1e12) * 1e3
        jitter = 1.0 + 0.004 * math.sin(attempt * 7 + idx)  # tiny, deterministic
        sp = override.get(sid, gm * prof / _PROFILE_GM * jitter)
        errs = ErrorStats(max_abs_err_o=1.9e-3, max_abs_err_lse=2.4e-5, rel_err_o=3.1e-3, tol_o=4.2e-3,
                          tol_lse=6.0e-5, original_max_abs_err_o=1.8e-3, original_max_abs_err_lse=2.2e-5)
        if status_error is not None and idx >= 5:
            results.append(ScenarioResult(id=sid, group=grp, flops=f, correct=False,
                                          failure_kind="crash" if idx == 5 else "not_run",
                                          message=status_error if idx == 5 else "run ended before this scenario"))
            continue
        kind = fail.get(sid)
        if kind is not None and kind != "impossible_speed":
            bad = ErrorStats(**{**errs.model_dump(), "max_abs_err_o": 0.21, "rel_err_o": 0.18})
            results.append(ScenarioResult(id=sid, group=grp, flops=f, correct=False, failure_kind=kind,
                                          check="tolerance_o" if kind == "wrong_output" else kind,
                                          message=f"{kind} on {sid}", errors=bad if kind == "wrong_output" else None))
            continue
        cand_ms = orig_ms / sp
        tflops = f / (cand_ms * 1e-3) / 1e12
        correct = kind is None
        results.append(ScenarioResult(
            id=sid, group=grp, flops=f, correct=correct,
            failure_kind=None if correct else "impossible_speed",
            check=None if correct else "physical_peak",
            message=None if correct else f"{tflops:.0f} TFLOP/s exceeds the physical peak {PHYSICAL_PEAK_TFLOPS:.0f}",
            errors=errs,
            candidate=TimingStats(median_ms=cand_ms, iqr_ms=cand_ms * 0.012, samples=50),
            original=TimingStats(median_ms=orig_ms, iqr_ms=orig_ms * 0.01, samples=50),
            speedup=sp, tflops=tflops, fraction_of_peak=tflops / MEASURED_PEAK_TFLOPS))
    ok = [r for r in results if r.correct and r.speedup]
    failed = [r.id for r in results if not r.correct]
    gmean = geomean(r.speedup for r in ok if r.speedup) if ok else None
    groups: dict[str, list[float]] = {}
    for r in ok:
        groups.setdefault(r.group, []).append(r.speedup or 1.0)
    status = "error" if status_error else ("correct" if not failed else "incorrect")
    met = status == "correct" and gmean is not None and gmean >= goal
    reason = (f"all correct and geomean {gmean:.3f}x >= {goal:.2f}x" if met else
              f"{len(failed)} scenarios failed" if failed else f"geomean {gmean:.3f}x < {goal:.2f}x")
    return Verdict(
        kernel=kernel, source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        build_hash=hashlib.sha256(f"so:{source}".encode()).hexdigest(), original_sha256=ORIGINAL_SHA,
        suite="quick", gpu="NVIDIA H200, driver 575.57, 132 SMs", status=status, num_scenarios=len(SCENARIOS),
        num_correct=len(ok), failed=failed, geomean_speedup=gmean,
        geomean_by_group={g: geomean(v) or 0.0 for g, v in groups.items()},
        worst=[r.id for r in sorted(ok, key=lambda r: r.speedup or 0)][:3],
        goal=Goal(against="original", min_speedup=goal, met=met, reason=reason), flags=flags or [],
        peak_tflops=MEASURED_PEAK_TFLOPS, physical_peak_tflops=PHYSICAL_PEAK_TFLOPS, original_timing="cached",
        checks=["tolerance_o", "tolerance_lse", "poison", "inputs_unchanged", "determinism", "physical_peak"],
        seed_draws=2, wall_s=41.5, message=status_error, scenarios=results)


def compile_result(source: str, *, regs: int = 168, spill: int = 0, hgmma: int = 0, hmma: int = 96) -> dict[str, Any]:
    """A CompileResult-shaped dict (harness/compile.py) for ``source``."""
    sha = hashlib.sha256(source.encode()).hexdigest()
    return {"source": "kernels/candidate.cu", "source_sha256": sha, "library": f".attnq/cache/{sha[:16]}.so",
            "build_hash": hashlib.sha256(f"so:{source}".encode()).hexdigest(), "arch": "sm_90a",
            "nvcc_version": "13.0.48", "flags": ["-O3", "-arch=sm_90a", "--use_fast_math"], "cache_hit": False,
            "compile_time_s": 18.4,
            "kernels": [{"name": "attn_fwd_kernel", "registers": regs, "shared_mem_bytes": 98304,
                         "stack_frame_bytes": spill, "spill_store_bytes": spill, "spill_load_bytes": spill,
                         "sass": {"hgmma": hgmma, "hmma": hmma, "ffma": 412, "ldl": spill // 4, "stl": spill // 4,
                                  "total": 5120}}],
            "warnings": [], "imported_symbols": ["cudaLaunchKernelExC", "cudaGetLastError"]}


# ---- sources: a realistic kernel skeleton with cumulative features ---------------------------
HEADER = """#include "attn_abi.h"
#include <cuda_bf16.h>
#include <cuda_runtime.h>
"""
BODY = """
template <int HEAD_DIM>
__global__ void __launch_bounds__(NUM_THREADS) attn_fwd_kernel(const attn_fwd_params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int m_block = blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / p.num_heads_q;
    const int h = bh % p.num_heads_q;
    const int h_kv = h / (p.num_heads_q / p.num_heads_kv);
    float row_max[ROWS_PER_THREAD];
    float row_sum[ROWS_PER_THREAD];
    float acc_o[ROWS_PER_THREAD][HEAD_DIM / 8];
    load_q_tile(p, smem, b, h, m_block);
    const int n_blocks = (p.seqlen_k + BLOCK_N - 1) / BLOCK_N;
    for (int n_block = 0; n_block < n_blocks; ++n_block) {
        load_kv_tile(p, smem, b, h_kv, n_block);
        __syncthreads();
        gemm_qk(smem, acc_s);
        online_softmax(acc_s, row_max, row_sum, p.softmax_scale);
        rescale_o(acc_o, row_max);
        gemm_pv(smem, acc_s, acc_o);
        __syncthreads();
    }
    write_o_and_lse(p, acc_o, row_max, row_sum, b, h, m_block);
}
"""
ENTRY = """
extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    if (p->abi_version != ATTN_ABI_VERSION) return 1;
    if (p->head_dim != 128 && p->head_dim != 64) return 2;
    dim3 grid((p->seqlen_q + BLOCK_M - 1) / BLOCK_M, p->batch * p->num_heads_q);
    const size_t smem_bytes = SMEM_BYTES;
    if (p->head_dim == 128) attn_fwd_kernel<128><<<grid, NUM_THREADS, smem_bytes, stream>>>(*p);
    else attn_fwd_kernel<64><<<grid, NUM_THREADS, smem_bytes, stream>>>(*p);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
"""
FEATURES: dict[str, str] = {
    "exp2": """
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
""",
    "swizzle": """
__device__ __forceinline__ int swizzle_128b(int row, int col) {
    return row * 64 + ((col / 8) ^ (row % 8)) * 8 + col % 8;
}
""",
    "cp_async": """
__device__ __forceinline__ void cp_async_16(void* smem_ptr, const void* gmem_ptr) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(gmem_ptr));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;"); }
""",
    "causal_skip": """
__device__ __forceinline__ int last_visible_block(int m_block, int seqlen_q, int seqlen_k) {
    const int last_row = (m_block + 1) * BLOCK_M - 1 + seqlen_k - seqlen_q;
    return min((seqlen_k + BLOCK_N - 1) / BLOCK_N, last_row / BLOCK_N + 1);
}
""",
    "wgmma": """
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
""",
    "tma": """
__device__ __forceinline__ void tma_load_2d(void* dst, const void* desc, unsigned long long* bar, int x, int y) {
    unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    unsigned m = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(d), "l"(desc), "r"(m), "r"(x), "r"(y) : "memory");
}
""",
    "pingpong": """
__device__ __forceinline__ void warpgroup_barrier_sync(int id) {
    asm volatile("bar.sync %0, 256;" :: "r"(id));
}
__device__ __forceinline__ void warpgroup_barrier_arrive(int id) {
    asm volatile("bar.arrive %0, 256;" :: "r"(id));
}
""",
    "cond_rescale": """
__device__ __forceinline__ bool needs_rescale(float old_max, float new_max) {
    return new_max - old_max > 8.0f;
}
""",
}


def source(params: dict[str, int], features: list[str], *, comment: str = "", extra: str = "") -> str:
    """A candidate source: parameter defines, the named feature blocks, the kernel and the entry point."""
    defs = "".join(f"#define {k} {v}\n" for k, v in params.items())
    head = f"// {comment}\n" if comment else ""
    return head + HEADER + defs + "".join(FEATURES[f] for f in features) + extra + BODY + ENTRY


P0 = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_THREADS": 128, "ROWS_PER_THREAD": 2, "STAGES": 1, "SMEM_BYTES": 49152}


def P(**kw: int) -> dict[str, int]:
    """P0 with overrides."""
    return {**P0, **kw}


def attempt(src: str, *, gm: float | None = None, n: int, goal: float = 1.0, error: dict[str, Any] | None = None,
            **vkw: Any) -> dict[str, Any]:
    """One fixture attempt: compile result + verdict (or an error)."""
    comp = None if error and error["error"] in ("compile_error", "policy_violation") else compile_result(src)
    v = None if gm is None else verdict("kernels/candidate.cu", src, gm, attempt=n, goal=goal, **vkw)
    return {"source_path": "kernels/candidate.cu", "source_text": src, "compile_result": comp,
            "verdict": None if v is None else v.model_dump(mode="json"), "error": error}


COMPILE_ERR = {"error": "compile_error", "message": "nvcc failed with 1 error",
               "diagnostics": [{"file": "kernels/candidate.cu", "line": 57, "column": 9, "severity": "error",
                                "message": "identifier \"acc_s\" is undefined"}]}
NO_GPU = {"error": "no_gpu", "message": "no NVIDIA GPU that runs sm_90a is visible"}


def stall_plateau() -> dict[str, Any]:
    f = ["exp2", "swizzle", "cp_async", "causal_skip", "wgmma", "tma", "pingpong", "cond_rescale"]
    a = [
        attempt(source(P(), []), gm=1.05, n=1),
        attempt(source(P(), f[:1]), gm=1.25, n=2),
        attempt(source(P(BLOCK_N=128), f[:2]), gm=1.52, n=3),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:3]), gm=1.84, n=4),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:4]), gm=1.83, n=5),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:5], extra="float broken = acc_s;\n"), n=6, error=COMPILE_ERR),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:5]), gm=1.85, n=7),
        attempt(source(P(BLOCK_N=128, STAGES=3, SMEM_BYTES=98304), f[:6]), gm=1.80, n=8),
        attempt(source(P(BLOCK_N=128, STAGES=3, SMEM_BYTES=98304, NUM_THREADS=256), f[:7]), gm=1.84, n=9),
        attempt(source(P(BLOCK_M=128, BLOCK_N=128, STAGES=3, SMEM_BYTES=98304, NUM_THREADS=256), f[:8]),
                gm=1.83, n=10),
    ]
    return {"name": "stall_plateau", "goal_speedup": 2.0, "attempts": a,
            "description": "Best 1.84x at #4, then 1.83, compile error, 1.85, 1.80, 1.84: the best does not improve "
                           "by >= 1 % over the 4 verified attempts #5-#9, so stall fires at #9 (not again at #10)."}


def suspicious_win() -> dict[str, Any]:
    f = ["exp2", "swizzle", "cp_async", "causal_skip", "wgmma", "tma", "pingpong"]
    over = {"causal_b1_h16_s8192_d128": 1090.0 / 230.0}
    conc = {"causal_b1_h16_s8192_d128": 3.4}
    a = [
        attempt(source(P(), f[:1]), gm=1.10, n=1),
        attempt(source(P(BLOCK_N=128), f[:2]), gm=1.22, n=2),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:3]), gm=1.25, n=3),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:4]), gm=1.71, n=4),
        attempt(source(P(BLOCK_N=128, STAGES=2, NUM_THREADS=256), f[:5]), gm=1.73, n=5),
        attempt(source(P(BLOCK_N=128, STAGES=3, NUM_THREADS=256), f[:6]), gm=1.75, n=6, override=over,
                fail={"causal_b1_h16_s8192_d128": "impossible_speed"},
                flags=[Flag(kind="above_physical_peak", scenario_id="causal_b1_h16_s8192_d128",
                            message="1090 TFLOP/s exceeds SMs x 4096 FLOP/clk x max clock = 1070 TFLOP/s")]),
        attempt(source(P(BLOCK_N=128, STAGES=3, NUM_THREADS=256, SMEM_BYTES=98304), f[:7]), gm=1.73, n=7,
                override=conc),
    ]
    return {"name": "suspicious_win", "goal_speedup": 1.5, "attempts": a,
            "description": "#4 jumps 1.25x -> 1.71x (1.37x in one step); #6 has a scenario above the physical "
                           "peak; #7's gain over #5 comes mostly from one causal scenario (1.9x -> 3.4x)."}


def churn() -> dict[str, Any]:
    f = ["exp2", "swizzle", "cp_async", "causal_skip", "wgmma"]
    p = P(BLOCK_N=128, STAGES=2)
    s3 = source(p, f[:3])
    s3_reformatted = "// retry the cp.async version with a cleaner layout\n" + s3.replace(
        "    const int h_kv = h / (p.num_heads_q / p.num_heads_kv);",
        "    const int h_kv  =  h / (p.num_heads_q / p.num_heads_kv);   // GQA mapping\n")
    s5 = source(p, f[:4])
    s6 = s5.replace("        rescale_o(acc_o, row_max);\n", "").replace("        __syncthreads();\n    }", "    }")
    s7 = s6.replace("    write_o_and_lse", "    fence_before_store();\n    write_o_and_lse")
    s8 = s7.replace("        gemm_pv(smem, acc_s, acc_o);\n",
                    "        rescale_o(acc_o, row_max);\n        gemm_pv(smem, acc_s, acc_o);\n        __syncthreads();\n")
    s4 = source(P(BLOCK_N=128, STAGES=3, SMEM_BYTES=98304), f[:5])
    s9 = s4.replace("#define BLOCK_M 64", "#define BLOCK_M 128")
    a = [
        attempt(source(P(), f[:1]), gm=1.20, n=1),
        attempt(source(P(BLOCK_N=128), f[:2]), gm=1.41, n=2),
        attempt(s3, gm=1.58, n=3),
        attempt(s4, gm=1.55, n=4),
        attempt(s3_reformatted, gm=1.57, n=5),
        attempt(s5, gm=1.63, n=6),
        attempt(s6, gm=1.66, n=7, fail={"causal_b4_h16_s1024_d128": "wrong_output"}),
        attempt(s7, gm=1.65, n=8, fail={"causal_b4_h16_s1024_d128": "wrong_output"}),
        attempt(s8, gm=1.64, n=9),
        attempt(s9, gm=1.56, n=10),
    ]
    return {"name": "churn", "goal_speedup": 2.0, "attempts": a,
            "description": "#5 is #3 with a comment and whitespace (identical); #6 re-adds the causal-skip helper "
                           "that #5 dropped; #9 puts back the rescale and barrier lines #7 removed, so it is nearly "
                           "identical to #6; #10 is #4 with one constant changed (nearly identical to #4)."}


def failures() -> dict[str, Any]:
    f = ["exp2", "swizzle", "cp_async"]
    a = [
        attempt(source(P(), f[:1]), gm=1.20, n=1),
        attempt(source(P(), f[:2], extra="float broken = acc_s;\n"), n=2, error=COMPILE_ERR),
        attempt(source(P(BLOCK_N=128), f[:2]), gm=1.30, n=3,
                fail={"gqa_b2_hq32_hkv8_s2048_d128": "wrong_output", "mqa_b4_hq16_hkv1_s2048_d64": "wrong_output"}),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:3]), n=4, error=NO_GPU),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:3]), gm=1.35, n=5,
                status_error="worker exited with signal 11 (SIGSEGV) during causal_b1_h16_s8192_d128"),
        attempt(source(P(BLOCK_N=128, STAGES=2, NUM_THREADS=256), f[:3]), gm=1.38, n=6),
    ]
    return {"name": "failures", "goal_speedup": 1.5, "attempts": a,
            "description": "#2 compile error, #3 incorrect (GQA/MQA), #4 no GPU (environment, skipped), #5 crash: "
                           "three consecutive failures #2-#5 fire stall at #5; #6 is correct again."}


def goal() -> dict[str, Any]:
    f = ["exp2", "swizzle", "cp_async", "causal_skip"]
    a = [
        attempt(source(P(), f[:1]), gm=1.21, n=1, goal=1.5),
        attempt(source(P(BLOCK_N=128), f[:2]), gm=1.34, n=2, goal=1.5),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:3]), gm=1.55, n=3, goal=1.5,
                fail={"ragged_b2_h16_q1000_k1337_d128": "unwritten_output", "causal_b4_h16_s1024_d128": "nan_inf"}),
        attempt(source(P(BLOCK_N=128, STAGES=2), f[:4]), gm=1.62, n=4, goal=1.5),
    ]
    return {"name": "goal", "goal_speedup": 1.5, "attempts": a,
            "description": "Goal 1.5x vs original. After #2 the best is 1.34x (gap); #3 is faster but fails 2 "
                           "scenarios; #4 meets the goal."}


def main() -> None:
    for fx in (stall_plateau(), suspicious_win(), churn(), failures(), goal()):
        (HERE / f"{fx['name']}.json").write_text(json.dumps(fx, indent=1) + "\n")


if __name__ == "__main__":
    main()
