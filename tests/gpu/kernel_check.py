"""Shared checks of a kernel against the one fp32 reference, for the GPU tests of the kernels.

What one call must satisfy (against ``harness.reference.attention_reference``, computed from the same
bf16/fp16 inputs upcast to fp32):

* return code 0; every element of o and lse written (both poisoned with a NaN payload first); q, k, v
  bit-identical afterwards; elements of a wider output buffer outside the o view untouched;
* rows that see no key: o exactly 0 and lse == +inf; every other lse finite;
* o: ``|o - o_ref| <= atol + rtol * |o_ref|`` elementwise, with bf16 ``atol = 1.5e-2, rtol = 1e-2`` and
  fp16 ``atol = 2e-3, rtol = 2e-3``. Basis: the output is rounded to the dtype (half an ulp: 2^-9
  relative for bf16, 2^-11 for fp16) and P is rounded to the dtype before the P V product; a few ulps
  at |o| scale, e.g. ~1.5e-2 for bf16 N(0, 1) data, as FlashAttention's own tests allow;
* lse: ``|lse - lse_ref| <= 1e-3 * max(1, |lse_ref|)``. Basis: lse depends only on fp32 dot products of
  the exact upcast inputs, so a correct kernel differs by summation order and exp2/log approximations
  (~1e-6 relative), while a wrong scale, a missing row max or a log2/ln mix-up is >= 1e-1 off.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.abi import KernelLibrary, load_kernel, make_params
from harness.checks import bits_equal, count_poison, poison_
from harness.reference import attention_reference

TOL_O = {torch.bfloat16: (1.5e-2, 1e-2), torch.float16: (2e-3, 2e-3)}  # (atol, rtol)
LSE_REL_TOL = 1e-3
SENTINEL = 123.0  # value left in a wider output buffer outside the o view
BF, FP = torch.bfloat16, torch.float16


@dataclass(frozen=True)
class Case:
    """One scenario. ``layout``: contiguous | q_slice | misaligned | bhsd | o_slice."""

    name: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    num_heads_q: int
    num_heads_kv: int
    head_dim: int
    causal: bool
    dtype: torch.dtype
    layout: str = "contiguous"
    magnitude: float = 1.0  # q and k are magnitude * N(0, 1)
    softmax_scale: float | None = None  # default 1/sqrt(head_dim)

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)


def build(source: Path, cache_dir: Path) -> KernelLibrary:
    """Build ``source`` with the harness's compiler driver (policy on); no warnings, no spills allowed."""
    from harness.compile import compile_kernel

    result = compile_kernel(source, cache_dir=cache_dir)
    # The policy's note on the driver entry-point query (TMA tensor maps, kernels/attn_fast.cu) is a
    # disclosure of what the symbol policy cannot see, not a compiler warning.
    warnings = [w for w in result.warnings if not w.message.startswith("uses cudaGetDriverEntryPoint")]
    assert not warnings, f"{source.name} compiled with warnings: {warnings}"
    spills = [k.name for k in result.kernels if k.spill_store_bytes or k.spill_load_bytes]
    assert not spills, f"{source.name}: register spills in {spills}"
    return load_kernel(Path(result.library))


def make_inputs(case: Case) -> tuple[torch.Tensor, ...]:
    """Random q, k, v views in the case's layout (never zeros), plus (o view, o base buffer)."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(case.name.encode()))
    dev, dt, d = "cuda", case.dtype, case.head_dim
    b, sq, sk, hq, hk = case.batch, case.seqlen_q, case.seqlen_k, case.num_heads_q, case.num_heads_kv

    def randn(*shape: int, mag: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * mag).to(dt)

    mag = case.magnitude
    if case.layout == "q_slice":  # q is the first half of a wider last dimension: strides matter
        q = randn(b, sq, hq, 2 * d, mag=mag)[..., :d]
        k, v = randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    elif case.layout == "misaligned":  # base pointers off 16 B and strides not multiples of 8
        q = randn(b, sq, hq, d + 1, mag=mag)[..., 1:]
        k = randn(b, sk, hk, d + 1, mag=mag)[..., 1:]
        v = randn(b, sk, hk, d + 1)[..., 1:]
    elif case.layout == "bhsd":  # [b, h, s, d] storage viewed as [b, s, h, d]
        q = randn(b, hq, sq, d, mag=mag).transpose(1, 2)
        k = randn(b, hk, sk, d, mag=mag).transpose(1, 2)
        v = randn(b, hk, sk, d).transpose(1, 2)
    else:
        q, k, v = randn(b, sq, hq, d, mag=mag), randn(b, sk, hk, d, mag=mag), randn(b, sk, hk, d)
    if case.layout == "o_slice":
        o_base = torch.full((b, sq, hq, 2 * d), SENTINEL, device=dev, dtype=dt)
        o = o_base[..., d:]
    elif case.layout == "bhsd":
        o_base = torch.empty((b, hq, sq, d), device=dev, dtype=dt)
        o = o_base.transpose(1, 2)
    else:
        o_base = torch.empty((b, sq, hq, d), device=dev, dtype=dt)
        o = o_base
    return q, k, v, o, o_base


def call(lib: KernelLibrary, q, k, v, o, lse, *, softmax_scale: float, causal: bool) -> int:
    """Call attn_fwd on the current torch stream with the workspace it asks for (filled with 0xFF:
    NaN as fp32, so a kernel that reads scratch it never wrote shows it); synchronize; return the status."""
    num_sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    params = make_params(q, k, v, o, lse, softmax_scale=softmax_scale, causal=causal, num_sms=num_sms)
    ws_bytes = lib.workspace_bytes(params)
    workspace = None
    if ws_bytes:
        workspace = torch.full((ws_bytes,), 0xFF, dtype=torch.uint8, device=q.device)
        params.workspace, params.workspace_bytes = workspace.data_ptr(), ws_bytes
    rc = lib.fwd(params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    del workspace
    return rc


def check_case(lib: KernelLibrary, case: Case) -> None:
    """Run ``case`` through ``lib`` and assert every rule of the module docstring."""
    q, k, v, o, o_base = make_inputs(case)
    lse = torch.empty((case.batch, case.num_heads_q, case.seqlen_q), device="cuda", dtype=torch.float32)
    poison_(o)  # a view: poisons exactly the elements the kernel must write
    poison_(lse)
    o_base_before = o_base.clone()
    inputs_before = [t.clone() for t in (q, k, v)]

    rc = call(lib, q, k, v, o, lse, softmax_scale=case.scale, causal=case.causal)
    assert rc == 0, f"attn_fwd returned {rc}"
    assert count_poison(o) == 0, f"{count_poison(o)} elements of o were never written"
    assert count_poison(lse) == 0, f"{count_poison(lse)} elements of lse were never written"
    for name, before, after in zip("qkv", inputs_before, (q, k, v), strict=True):
        assert bits_equal(before, after), f"input {name} was modified"
    if case.layout == "o_slice":
        outside = o_base[..., : case.head_dim]
        assert bits_equal(outside, o_base_before[..., : case.head_dim]), "wrote outside the o view"

    o_ref, lse_ref = attention_reference(q, k, v, softmax_scale=case.scale, causal=case.causal)
    empty = torch.isposinf(lse_ref)  # [b, hq, sq]: rows that see no key
    if case.causal and case.seqlen_q > case.seqlen_k:
        assert bool(empty.any()), "scenario meant to have rows with no visible key has none"
    assert torch.equal(torch.isposinf(lse), empty), "lse = +inf must mark exactly the rows that see no key"
    assert bool(torch.isfinite(lse[~empty]).all()), "lse must be finite on rows that see a key"
    assert bool((o.float()[empty.transpose(1, 2)] == 0).all()), "o must be exactly 0 on rows that see no key"

    atol, rtol = TOL_O[case.dtype]
    err_o = (o.float() - o_ref).abs()
    worst = float((err_o - (atol + rtol * o_ref.abs())).max())
    assert worst <= 0, (f"o off by up to {float(err_o.max()):.3g} (atol {atol}, rtol {rtol}); "
                        f"max|o_ref| = {float(o_ref.abs().max()):.3g}")
    if bool((~empty).any()):
        err_lse = (lse[~empty] - lse_ref[~empty]).abs()
        bound = LSE_REL_TOL * lse_ref[~empty].abs().clamp(min=1.0)
        assert bool((err_lse <= bound).all()), f"lse off by up to {float(err_lse.max()):.3g}"


def assert_refuses_unknown_dtype(lib: KernelLibrary) -> None:
    """A dtype code other than bf16 (0) / fp16 (1) is refused with a nonzero status before any launch."""
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 8, device="cuda", dtype=torch.float32)
    params = make_params(q, q, q, o, lse, softmax_scale=0.125, causal=False, num_sms=132)
    params.dtype = 7
    assert lib.fwd(params, torch.cuda.current_stream().cuda_stream) != 0

