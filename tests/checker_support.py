"""Test support for the checker (harness/checker.py) on the CPU: kernels written in Python that work on
the memory the ABI's pointers point at, exactly as a compiled kernel does (no tensors are handed
over, only the params struct), and a Runner wired to them.
"""

from __future__ import annotations

import ctypes
import time
from types import SimpleNamespace
from typing import Any

import torch

from harness.checker import Fail, HostDevice, Runner
from harness.endpoints import CallResult
from harness.reference import attention_reference
from harness.scenarios import Scenario
from harness.verdict import ScenarioResult
from harness.worker import WorkerJob

DTYPES = {0: torch.bfloat16, 1: torch.float16}


#: Bytes of storage mapped past each view (the arena's guard band is there: harness.buffers.GUARD_BYTES), so a
#: cheat can write past it and a tile-rounding kernel can read a cache's slack.
SLACK_BYTES = 64 << 10


def _view(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    n = 1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=True)) if all(shape) else 0
    esize = torch.empty((), dtype=dtype).element_size()
    slack = SLACK_BYTES // esize
    buf = (ctypes.c_char * ((n + slack) * esize)).from_address(ptr)
    return torch.frombuffer(buf, dtype=dtype, count=n + slack).as_strided(shape, strides)


def tensors(p: Any) -> SimpleNamespace:
    """q, k, v, o, lse views over the memory ``p`` (an AttnFwdParams) points at, plus scale and causal."""
    dt = DTYPES[p.dtype]
    b, sq, sk, hq, hk, d = p.batch, p.seqlen_q, p.seqlen_k, p.num_heads_q, p.num_heads_kv, p.head_dim

    def t(name: str, s: int, h: int) -> torch.Tensor:
        st = tuple(getattr(p, f"{name}_{x}_stride") for x in ("batch", "row", "head")) + (1,)
        return _view(getattr(p, name), (b, s, h, d), st, dt)

    lse = _view(p.lse, (b, hq, sq), (hq * sq, sq, 1), torch.float32)
    return SimpleNamespace(q=t("q", sq, hq), k=t("k", sk, hk), v=t("v", sk, hk), o=t("o", sq, hq), lse=lse,
                           scale=p.softmax_scale, causal=bool(p.causal), params=p)


def honest(p: SimpleNamespace) -> None:
    o, lse = attention_reference(p.q, p.k, p.v, softmax_scale=p.scale, causal=p.causal)
    p.o.copy_(o), p.lse.copy_(lse)


class PyKernel:
    """A harness.endpoints.KernelEndpoint running ``body(tensors(params))`` in this process. ``ws(params)``
    answers the workspace query (default 0). Records every call's params (``seen``) and the queries'."""

    def __init__(self, body: Any, name: str = "candidate", ws: Any = None) -> None:
        self.body, self.name, self.ws = body, name, ws
        self.calls, self.seen, self.queries = 0, [], []
        self.timed: list[tuple[int, bool]] = []  # (perf_counter_ns at the timed call, tail asked)

    def workspace_bytes(self, params: Any) -> int:
        self.queries.append(params)
        return int(self.ws(params)) if self.ws else 0

    def attach(self, bufs: Any) -> None:
        pass

    def detach(self, bufs: Any) -> None:
        pass

    def _run(self, params: Any) -> int:
        self.calls += 1
        self.seen.append(params)
        return int(self.body(tensors(params)) or 0)

    def call(self, params: Any) -> CallResult:
        return CallResult(self._run(params))

    def timed_call(self, params: Any, tail: bool = False) -> CallResult:
        """Host-timed; records when it ran and whether the device tail was asked (``timed``)."""
        t0 = time.perf_counter()
        self.timed.append((time.perf_counter_ns(), tail))
        status = self._run(params)
        ms = (time.perf_counter() - t0) * 1e3
        return CallResult(status, event_ms=ms, wall_ms=ms, tail_ms=0.0 if tail else None)

    def close(self) -> None:
        pass


SC = Scenario(group="t", batch=2, seqlen_q=24, seqlen_k=24, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)


def make_runner(cand: Any, orig: Any = None, *, min_samples: int = 3, max_samples: int = 6, budget_ms: float = 1e9,
                draws: int = 2, repeats: int = 3, seed: int = 1, **job_fields: Any) -> Runner:
    """A CPU Runner on ``cand`` and (default) an honest original, arenas in plain CPU tensors; ``job_fields``:
    further harness.worker.WorkerJob fields (``original_sparse_ms`` 0 unless given: host-timed kernels would
    turn harness.timed_samples.OriginalPlan's sparse mode on by their speed)."""
    job_fields.setdefault("original_sparse_ms", 0.0)  # deterministic: the original in every sample unless asked
    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[SC], seed=seed, device="cpu", draws=draws,
                    repeats=repeats, min_samples=min_samples, max_samples=max_samples, budget_ms=budget_ms,
                    **job_fields)
    return Runner(job, cand, orig or PyKernel(honest, "original"), HostDevice())


def run_scenario(sc: Scenario, cand: Any, orig: Any = honest, *, draws: int = 2, repeats: int = 1, seed: int = 1,
                 min_samples: int = 3, max_samples: int = 3, **job_fields: Any) -> tuple[Runner, ScenarioResult]:
    """One scenario through the whole CPU checker (checked draws, then the timed loop with its repeats):
    ``cand``/``orig`` are kernel bodies (``body(tensors(params))``) or PyKernels; ``job_fields``: further
    harness.worker.WorkerJob fields (e.g. ``diag_timing_log``)."""
    c = cand if isinstance(cand, PyKernel) else PyKernel(cand)
    o = orig if isinstance(orig, PyKernel) else PyKernel(orig, "original")
    job_fields.setdefault("original_sparse_ms", 0.0)  # deterministic: the original in every sample unless asked
    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=[sc], seed=seed, device="cpu", draws=draws,
                    repeats=repeats, min_samples=min_samples, max_samples=max_samples, budget_ms=1e9, **job_fields)
    runner = Runner(job, c, o, HostDevice())
    return runner, runner.run(sc, 0)


def check_scenario(sc: Scenario, cand: Any, orig: Any = honest, **kw: Any) -> Any:
    """:func:`run_scenario`'s worst checked-draw errors (ErrorStats); raises harness.checker.Fail with the
    failure's kind, check and message when the scenario fails."""
    _, res = run_scenario(sc, cand, orig, **kw)
    if not res.correct:
        raise Fail(res.failure_kind or "", res.check or "", res.message or "")
    return res.errors


def is_dense(p: Any) -> bool:
    """The call's layout was dense: q, k, v and o with head stride head_dim (harness.buffers' padded layouts
    add 8). ``p``: the AttnFwdParams a kernel was called with."""
    return all(getattr(p, f"{t}_head_stride") == p.head_dim for t in ("q", "k", "v", "o"))


def count_reads(monkeypatch: Any) -> list[str]:
    """The names of the host reads of a tensor made from here on (each one a device synchronization on a GPU):
    ``item``, ``tolist``, ``nonzero`` and the conversions to bool, float, int and index, patched on
    ``torch.Tensor`` through pytest's ``monkeypatch``."""
    calls: list[str] = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero"):
        real = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *a: Any, _n: str = name, _r: Any = real, **k: Any) -> Any:
            calls.append(_n)
            return _r(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls
