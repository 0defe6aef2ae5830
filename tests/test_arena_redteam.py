"""Red team of the arena (harness/buffers.py) and the workspace query, on the CPU checker: each section a class of
hostile (or merely unusual) kernel, what it did before the fix, and the check that now answers it.

1. An ABSURD WORKSPACE: ``attn_fwd_workspace_bytes`` answering 2**60 (or 2**64 - 1) made the checker's allocation
   raise (a "launch_error" verdict naming the allocator, or a crash of the runner). Now the memory guard weighs the
   workspaces against the free memory before any arena exists: ``out_of_memory`` / ``memory_guard``, with the number.
2. ODD WORKSPACE SIZES and ALIGNMENT GAPS: a workspace of 1001 bytes made the arena's guard views misaligned (the
   runner raised for an honest kernel); the bytes between a region's end rounded to 256 and its guard were in no
   guard at all (a write 64 KiB + 4 bytes past a 160-byte lse went unseen). Now the workspace is given rounded up to
   256 bytes, every region's size is a multiple of 4, and each guard after a region reaches the next region's
   guard: ``guard_bands`` sees a byte written anywhere outside the views.
3. The arena's PAGE SLACK, a channel between the candidate's two processes: both map the candidate's arena, whose
   size was a multiple of 256 bytes, so past its last guard band lay up to 4 KiB of the last page (a GPU: of the
   cudaMalloc granule), shared by the two mappings and checked by nobody. A race hid its draws there and the repeat
   process replayed them: a racy kernel passed ``determinism`` on every seed (tests/hostkernels/attn_host.c cheat
   17). Now an arena is a whole number of pages (2 MiB granules on a GPU) and its last guard band reaches its end:
   ``guard_bands`` fails the first write (cheat 18, the same race without the table, is the control).
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.arena import HostArenas
from harness.buffers import GUARD_BYTES, WORKSPACE_ALIGN, Buffers
from harness.scenarios import Scenario
from tests import hostkernels
from tests.checker_support import SC, PyKernel, honest, run_scenario

#: lse of 2 x 4 x 5 x 4 = 160 bytes: its region ends 96 bytes short of the next 256-byte boundary.
SHORT = Scenario(group="t", batch=2, seqlen_q=5, seqlen_k=7, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=False)


# ------------------------------------------------------------------------------ 1: an absurd workspace

@pytest.mark.parametrize("asked", [2**60, 2**64 - 1, 1 << 50])
def test_an_absurd_workspace_is_refused_by_the_memory_guard_before_any_arena(asked: int) -> None:
    """Class: a workspace query that asks for more memory than exists. Before: the allocator raised inside the
    runner. Now ``out_of_memory`` / ``memory_guard`` with the bytes asked for, and no arena is allocated."""
    sizes: list[int] = []

    def allocate(nbytes: int) -> Any:
        sizes.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    from harness.checker import HostDevice, Runner
    from harness.worker import WorkerJob

    job = WorkerJob(original_sparse_ms=0.0, candidate_lib="c.so", original_lib="o.so", scenarios=[SC], seed=1, device="cpu", draws=2,
                    repeats=1, min_samples=3, max_samples=3, budget_ms=1e9)
    cand = PyKernel(honest, ws=lambda p: asked)
    res = Runner(job, cand, PyKernel(honest, "original"), HostDevice(), allocate=allocate).run(SC, 0)
    assert (res.correct, res.failure_kind, res.check) == (False, "out_of_memory", "memory_guard"), res.message
    assert f"asked for {asked} bytes" in (res.message or "") and "refused before allocating" in (res.message or "")
    assert sizes == [] and cand.calls == 0


def test_a_workspace_that_fits_is_given() -> None:
    """The other side of the same guard: a workspace that fits (3 MiB) is allocated and the honest kernel using
    it is correct."""
    _, res = run_scenario(SC, PyKernel(honest, ws=lambda p: 3 << 20))
    assert res.correct, res.message


# ------------------------------------------------------------------- 2: odd workspaces and alignment gaps

def _probe_offsets(b: Buffers) -> list[tuple[str, int]]:
    """Byte offsets in the arena outside every region's data (each region's first 8 bytes past its end, the 8
    bytes around the end of its 64 KiB guard, which is where the 256-byte alignment gap lay, the next region's
    guard's last bytes) and the arena's last 8 bytes: (region, offset)."""
    base = b.arena.data_ptr()
    out = []
    for name in ("q", "k", "v", "o", "lse", "ws"):
        r = b.region(name)
        end = r.data_ptr() - base + r.numel() * r.element_size()
        for off in [*range(end, end + 8), *range(end + GUARD_BYTES - 8, end + GUARD_BYTES + 264, 4)]:
            if off < b.nbytes:
                out.append((name, off))
    out += [("end", off) for off in range(b.nbytes - 8, b.nbytes)]
    return out


@pytest.mark.parametrize("ws", [1, 2, 1001, 1002, 4097])
def test_every_byte_outside_the_regions_is_guarded_whatever_the_workspace(ws: int) -> None:
    """Class: a write just past a region (an output view's region, the workspace) into the bytes its alignment
    leaves before the next region. For odd workspace sizes the arena is built (before: the runner raised), the
    kernel is given the size rounded up to 256 bytes, and a single byte written at any probed offset outside the
    regions is named by ``guard_bands`` (before: the gap past a 64 KiB guard was in no guard)."""
    b = Buffers(torch, SHORT, torch.bfloat16, "cpu", workspace_bytes=ws)
    assert b.workspace_bytes % WORKSPACE_ALIGN == 0 and b.workspace_bytes >= ws and b.nbytes % mmap.PAGESIZE == 0
    assert b.guards_intact() is None
    for name, off in _probe_offsets(b):
        old = int(b.arena[off])
        b.arena[off] = old ^ 0x01
        assert b.guards_intact() is not None, f"a byte at {off} past {name} was not seen (workspace {ws})"
        b.arena[off] = old
    assert b.guards_intact() is None


def test_an_honest_kernel_with_an_odd_workspace_is_correct_and_a_write_past_it_is_caught() -> None:
    """Through the whole checker: an honest kernel asking for 1001 bytes is correct (before: the runner raised on
    the misaligned guard), and one writing a byte right past the workspace it was given fails ``guard_bands``."""
    _, res = run_scenario(SHORT, PyKernel(honest, ws=lambda p: 1001))
    assert res.correct, res.message

    def past_ws(t: Any) -> None:
        honest(t)
        p = t.params
        ctypes.memset(p.workspace + p.workspace_bytes, 0, 1)

    _, res = run_scenario(SHORT, PyKernel(past_ws, ws=lambda p: 1001))
    assert (res.failure_kind, res.check) == ("out_of_bounds_write", "guard_bands"), res.message
    assert "after the workspace" in (res.message or "")


def test_a_write_in_the_old_alignment_gap_past_lse_is_caught() -> None:
    """The gap itself: lse ends 96 bytes before a 256-byte boundary; the guard after it was 64 KiB long, so the
    bytes from 64 KiB to 64 KiB + 96 past lse's end were in no guard (before: correct). Now ``guard_bands``."""

    def in_gap(t: Any) -> None:
        honest(t)
        end = t.params.lse + t.lse.numel() * 4
        ctypes.memset(end + GUARD_BYTES + 4, 0x11, 4)

    _, res = run_scenario(SHORT, in_gap)
    assert (res.failure_kind, res.check) == ("out_of_bounds_write", "guard_bands"), res.message
    assert "after lse" in (res.message or "")


def test_arenas_are_whole_pages_on_the_cpu_and_whole_2_mib_granules_on_a_gpu() -> None:
    """What a process maps of an arena (pages; a cudaMalloc's 2 MiB granules) is the arena: its size is a multiple
    of the granule and its last guard band reaches its end (the device kind only picks the granule here: the
    allocation is a host tensor)."""
    for device, granule in (("cpu", mmap.PAGESIZE), ("cuda", 2 << 20)):
        b = Buffers(torch, SC, torch.bfloat16, device, workspace_bytes=256,
                    allocate=lambda n: torch.empty(n, dtype=torch.uint8))
        assert b.nbytes % granule == 0
        b.arena[b.nbytes - 1] = 0
        assert b.guards_intact() == "1 elements written after the workspace"


# ---------------------------------------------------------------- 3: the page slack, between two processes

needs_cc = pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")


def test_a_write_past_an_arena_mapping_reaches_the_other_mapping() -> None:
    """Why the slack mattered: two mappings of one memfd (the candidate's two launcher processes map the same
    arena) share the bytes past the file's end up to the page's end; writes there outlast the call."""
    arenas = HostArenas()
    t = arenas.allocate(1000)
    _, fds = arenas.export(t)
    a, b = mmap.mmap(fds[0], 1000), mmap.mmap(fds[0], 1000)
    pa = ctypes.addressof(ctypes.c_char.from_buffer(a))
    pb = ctypes.addressof(ctypes.c_char.from_buffer(b))
    ctypes.memmove(pa + 3000, b"slack", 5)
    assert ctypes.string_at(pb + 3000, 5) == b"slack"
    arenas.free(t)


@needs_cc
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_race_whose_draws_cross_processes_in_the_page_slack_fails_the_guards(tmp_path: Path, seed: int) -> None:
    """Class: a covert channel between the candidate's two processes in memory both map. Cheat 17 keeps each
    call's race draw in the arena's page slack keyed by a permutation-invariant content key, so the repeat process
    replays its source's draw: before the fix correct on every seed (the split defeated); now its first write lands
    in the last guard band (``guard_bands`` on checked draw 0). The control, cheat 18 (no table), fails
    ``determinism``."""
    from tests.test_trust_split import _verify

    res, _ = _verify(tmp_path, cheat=17, samples=8, seed=seed)
    assert (res.check, res.failure_kind) == ("guard_bands", "out_of_bounds_write"), res.message
    assert "after the workspace" in (res.message or "") and "[draw 0:" in (res.message or "")
    res, _ = _verify(tmp_path, cheat=18, samples=8, seed=seed)
    assert (res.check, res.failure_kind) == ("determinism", "nondeterministic"), res.message
