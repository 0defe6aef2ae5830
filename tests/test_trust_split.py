"""The trust split on the CPU: the candidate runs in a launcher process (harness/launcher.py) that maps
only its own buffers (memfd arenas here, CUDA IPC on a GPU), confined by harness/sandbox.py; the
checker (harness/checker.py) compares and judges in the worker. The kernels are CPU builds of the ABI
(tests/hostkernels/attn_host.c, gcc); every process, socket, arena and sandbox layer is the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from harness import REPO_ROOT, child_pythonpath
from harness.abi import make_params
from harness.arena import HostArenas
from harness.buffers import Buffers
from harness.checker import HostDevice, Runner
from harness.guard import build_entry_guard
from harness.host_cover import HOST_COVER_CYCLES
from harness.launch_client import LauncherKernel, LoadTimeout
from harness.sandbox import _seccomp_module, apply_sandbox, landlock_abi
from harness.scenarios import Scenario
from harness.worker import WorkerJob
from tests import hostkernels

pytestmark = pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")

SC = Scenario(group="t", batch=2, seqlen_q=20, seqlen_k=24, num_heads_q=4, num_heads_kv=2, head_dim=16, causal=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostkernels")


def _child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a Python child, the checkout first on the inherited PYTHONPATH (where
    the GPU box's wheels are: replacing it loses pydantic and pyseccomp there)."""
    return {**os.environ, "PYTHONPATH": child_pythonpath(), **extra}


_PROBE = ("import json, tempfile; from harness.sandbox import apply_sandbox; "
          "r = apply_sandbox(tempfile.mkdtemp()); print(json.dumps([r.complete, r.warnings]))")


def _sandbox_probe() -> tuple[bool, str]:
    """Whether the full sandbox applies in a fresh interpreter as the launcher starts one, and if not why
    (the report's warnings). A probe that crashes counts as applying: the tests then run and show the error
    instead of skipping."""
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=_child_env(), timeout=60)
    if probe.returncode != 0:
        return True, ""
    complete, warnings = json.loads(probe.stdout)
    return complete, "; ".join(warnings)


SANDBOX, _WHY_NOT = _sandbox_probe()
#: the skip reason of every test that needs the full sandbox
NO_SANDBOX = f"the full sandbox does not apply on this machine: {_WHY_NOT}"


def _verify(built: Path, cheat: int = 0, probe: int = 0, *, sandbox: str = "on", guard: bool = True,
            samples: int = 3, split: bool = True, seed: int = 11, sc: Scenario = SC, lib: Path | None = None,
            again_after_s: float | None = None, **job_fields: object) -> tuple:
    """Check and time ``sc`` with the candidate built with ``cheat``/``probe`` (or the library ``lib``)
    against the honest build, each in launchers (``split``: the candidate in two, the repeats in the
    second, as harness/worker.py does; ``job_fields``: further WorkerJob fields; ``again_after_s``: run
    ``sc`` a second time through the same launchers that many seconds after the first, as the worker's
    next scenario, and return that result). Returns ``(ScenarioResult, candidate sandbox report)``."""
    cand_lib, cand_sha = hostkernels.build(built, cheat=cheat, probe=probe) if lib is None else (lib, _sha(lib))
    orig_lib, orig_sha = hostkernels.build(built)
    arenas = HostArenas()
    g = str(build_entry_guard(built)) if guard else None
    common = {"arenas": arenas, "device": "cpu", "guard": g, "sandbox": sandbox}
    orig = LauncherKernel("original", str(orig_lib), orig_sha, **common)
    cand = LauncherKernel("candidate", str(cand_lib), cand_sha, **common)
    cand_b = LauncherKernel("candidate-b", str(cand_lib), cand_sha, **common) if split else None
    try:
        orig.load(), cand.load()
        if cand_b is not None:
            cand_b.load()
        job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(cand_lib), original_lib=str(orig_lib), scenarios=[sc], seed=seed, device="cpu",
                        min_samples=samples, max_samples=samples, budget_ms=1e9, **job_fields)
        runner = Runner(job, cand, orig, HostDevice(), allocate=arenas.allocate, free=arenas.free, cand_b=cand_b)
        res = runner.run(sc, 0)
        if again_after_s is not None:
            time.sleep(again_after_s)
            res = runner.run(sc, 1)
        return res, cand.sandbox
    finally:
        cand.close(), orig.close()
        if cand_b is not None:
            cand_b.close()


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _cpu_candidate(built: Path) -> Iterator[tuple[LauncherKernel, HostArenas]]:
    """A CPU launcher process of the built host kernel, loaded, with the arenas it can be given; closed after."""
    lib, sha = hostkernels.build(built)
    arenas = HostArenas()
    k = LauncherKernel("candidate", str(lib), sha, arenas=arenas, device="cpu")
    try:
        k.load()
        yield k, arenas
    finally:
        k.close()


def test_an_honest_kernel_in_its_own_process_is_correct(built: Path) -> None:
    res, report = _verify(built)
    assert res.correct, res.message
    # 3 dense calls, or more where the wall clock alone would have convicted (CPU launchers' wake-ups: WALL_MORE)
    assert res.candidate is not None and res.candidate.samples >= 3
    assert set(report) == {"mode", "landlock_abi", "seccomp", "caps_dropped", "warnings"} and report["mode"] == "on"


@pytest.mark.skipif(not SANDBOX, reason=NO_SANDBOX)
@pytest.mark.parametrize(("probe", "what"), [(1, "an AF_INET socket"), (2, "fork"), (3, "a shell command"),
                                             (4, "a file outside its temp dir"), (5, "the checker's memory")])
def test_the_sandbox_refuses_each_escape(built: Path, probe: int, what: str) -> None:
    """Each probe returns 99 when its escape worked and computes honestly when it was refused."""
    res, report = _verify(built, cheat=7, probe=probe)
    assert res.correct, f"{what}: {res.check}/{res.failure_kind}: {res.message}"
    assert report["landlock_abi"] and report["seccomp"] and report["caps_dropped"] and not report["warnings"]


def test_without_the_sandbox_the_probe_does_escape(built: Path) -> None:
    """The control: the same probe with ATTNQ_SANDBOX=off gets its socket (so the test above tests the
    sandbox, not a broken probe), and the report says the sandbox was off."""
    res, report = _verify(built, cheat=7, probe=1, sandbox="off")
    assert (res.check, res.failure_kind) == ("launch_status", "unsupported") and "99" in res.message
    assert report["warnings"] and "off" in report["warnings"][0]


def test_a_library_that_never_finishes_loading_costs_the_load_limit(built: Path) -> None:
    lib, sha = hostkernels.build(built, cheat=8)
    k = LauncherKernel("candidate", str(lib), sha, arenas=HostArenas(), device="cpu")
    t0 = time.monotonic()
    with pytest.raises(LoadTimeout, match="within 2 s"):
        k.load(timeout_s=2.0)
    assert time.monotonic() - t0 < 10
    assert k.proc.poll() is not None  # the launcher was killed


@pytest.mark.skipif(hostkernels.cudart_dir() is None, reason="needs libcudart.so.13 (toolkit or nvidia wheel)")
def test_the_entry_point_guard_refuses_other_driver_functions_at_run_time(built: Path) -> None:
    """The candidate's import of cudaGetDriverEntryPoint binds to the guard (loaded first, RTLD_GLOBAL):
    cuStreamCreate is refused and reported (symbol_policy/forbidden_call); cuTensorMapEncodeTiled passes."""
    res, _ = _verify(built, cheat=9)
    assert (res.check, res.failure_kind) == ("symbol_policy", "forbidden_call"), res.message
    assert "cuStreamCreate" in res.message
    res, _ = _verify(built, cheat=10)
    assert res.correct, res.message
    res, _ = _verify(built, cheat=9, guard=False)  # without the guard the runtime answers (no driver here: NULL)
    assert res.check != "symbol_policy"


def test_the_worker_speaks_its_protocol_with_launchers(built: Path) -> None:
    """harness.worker end to end on a CPU job: hello, ready (with the sandbox report), a correct result,
    done; a library whose constructor never returns ends in load_error after the load limit."""
    lib, sha = hostkernels.build(built)

    def run(cand: Path, cand_sha: str) -> list[dict]:
        job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(cand), original_lib=str(lib), candidate_sha256=cand_sha, original_sha256=sha,
                        scenarios=[SC], seed=3, device="cpu", min_samples=3, max_samples=3, load_timeout_s=3.0,
                        entry_guard_lib=str(build_entry_guard(built)))
        r, w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-m", "harness.worker", "--fd", str(w)], stdin=subprocess.PIPE,
                                pass_fds=(w,), env=_child_env(), cwd=str(REPO_ROOT),
                                stderr=subprocess.DEVNULL)
        os.close(w)
        proc.communicate(job.model_dump_json().encode(), timeout=120)
        with os.fdopen(r) as fh:
            return [json.loads(line) for line in fh]

    msgs = run(lib, sha)
    assert [m["type"] for m in msgs] == ["hello", "ready", "start", "result", "done"]
    assert msgs[3]["result"]["correct"], msgs[3]["result"]["message"]
    assert "sandbox" in msgs[1] and msgs[1]["entry_guard"] is True
    assert msgs[1]["host_cover_cycles"] == {"anchor": HOST_COVER_CYCLES, "candidate": 0, "original": 0}
    hang, hang_sha = hostkernels.build(built, cheat=8)
    t0 = time.monotonic()
    msgs = run(hang, hang_sha)
    assert [m["type"] for m in msgs] == ["hello", "load_error"] and "within 3 s" in msgs[1]["message"]
    assert time.monotonic() - t0 < 60


def test_the_sandbox_probe_finds_what_this_interpreter_finds() -> None:
    """The sandbox tests' skip condition is honest: the fresh interpreter the probe starts (as a launcher
    is started: same executable, this PYTHONPATH after the checkout) sees the Landlock and the seccomp
    binding this one sees. On the GPU box a child whose PYTHONPATH was replaced lost pyseccomp (installed
    to /tmp/site) and 16 tests skipped as if the kernel lacked a sandbox."""
    try:
        _seccomp_module()
        binding = True
    except ImportError:
        binding = False
    assert not (binding and "no seccomp binding" in _WHY_NOT), _WHY_NOT
    assert not (landlock_abi() is not None and "Landlock unavailable" in _WHY_NOT), _WHY_NOT


def test_the_device_tail_is_asked_of_the_launchers_and_logged(built: Path, tmp_path: Path) -> None:
    """ATTNQ_STREAM_ESCAPE_CHECK=tail reaches the launcher processes (each timed call's reply carries its
    device tail: 0.0 on the CPU) and ATTNQ_DIAG_ORDER / ATTNQ_DIAG_TIMING_LOG the checker; an untimed or
    untailed call carries none."""
    log = tmp_path / "timing.jsonl"
    res, _ = _verify(built, samples=4, stream_escape_check="tail", diag_order="alternate", diag_timing_log=str(log))
    assert res.correct, res.message
    (rec,) = [json.loads(line) for line in log.read_text().splitlines()]
    order = [s["orig_first"] for s in rec["samples"]]  # 4 samples, or more until 3 fresh dense calls
    assert rec["split"] is True and len(order) >= 4 and order == [i % 2 == 1 for i in range(len(order))]
    assert all(s["tail_c"] == 0.0 and s["tail_o"] == 0.0 for s in rec["samples"])
    reps = [s for s in rec["samples"] if s["repeat"]]  # the last 4 (the default), each in its source's other launcher
    assert len(reps) == 4 and rec["samples"][-4:] == reps and all(s["repeat_of"] and not s["counted"] for s in reps)
    assert all(s["process"] != _process_of(rec["samples"], s["repeat_of"]) for s in reps)
    with _cpu_candidate(built) as (k, arenas):
        bufs = Buffers(torch, SC, torch.bfloat16, "cpu", allocate=arenas.allocate)
        k.attach(bufs)
        p = make_params(bufs.q, bufs.k, bufs.v, bufs.o_c, bufs.lse_c, softmax_scale=0.25, causal=True, num_sms=1)
        assert k.timed_call(p, tail=True).tail_ms == 0.0
        assert k.timed_call(p).tail_ms is None and k.call(p).tail_ms is None
        k.detach(bufs)


def _process_of(samples: list[dict], call: str) -> int:
    """The process of call ``call`` (``"checked draw i"``: draw 0 in the first launcher, draw 1 in the second,
    SC declares nothing so there are no others; ``"timed call n"``: the log's)."""
    kind, _, index = call.rpartition(" ")
    return int(index) if kind == "checked draw" else samples[int(index)]["process"]


def test_one_candidate_launcher_when_the_diagnostic_asks(built: Path) -> None:
    """ATTNQ_DIAG_SINGLE_CANDIDATE_LAUNCHER=1: the worker starts no second candidate launcher."""
    from harness.config import Settings
    from harness.worker import finish_endpoints, spawn_launchers

    lib, sha = hostkernels.build(built)
    fields = Settings(diag_single_candidate_launcher=True).timing_fields()
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(lib), original_lib=str(lib), candidate_sha256=sha, original_sha256=sha,
                    scenarios=[], seed=1, device="cpu", **fields)
    cand, orig, arenas, cand_b = spawn_launchers(job)
    assert cand_b is None
    _, info = finish_endpoints(job, cand, orig, arenas, cand_b)
    cand, orig, cand_b = info.pop("endpoints")
    cand.close(), orig.close()
    assert cand_b is None


def test_sandbox_report_degrades_with_a_warning_when_off() -> None:
    rep = apply_sandbox("/nonexistent", mode="off")
    assert not rep.complete and rep.warnings and "off" in rep.warnings[0]
    assert landlock_abi() is None or landlock_abi() >= 1


def test_arenas_reach_the_launcher_and_nothing_else(built: Path) -> None:
    """A launcher sees only arenas it was given: a pointer into an unattached buffer is refused before
    anything runs (the original's arena is never attached to the candidate)."""
    with _cpu_candidate(built) as (k, arenas):
        mine = Buffers(torch, SC, torch.bfloat16, "cpu", allocate=arenas.allocate)
        other = Buffers(torch, SC, torch.bfloat16, "cpu", allocate=arenas.allocate)
        k.attach(mine)
        p = make_params(other.q, other.k, other.v, other.o_c, other.lse_c, softmax_scale=0.25, causal=True, num_sms=1)
        with pytest.raises(Exception, match="outside every arena"):
            k.call(p)
        k.detach(mine)


@pytest.mark.skipif(not SANDBOX, reason=NO_SANDBOX)
def test_the_weaker_seccomp_mode_keeps_the_filter_and_says_what_it_leaves_out(tmp_path: Path) -> None:
    """The fallback when CUDA IPC fails under the full sandbox: seccomp only, reported as such."""
    code = ("import json, os, socket, tempfile; from harness.sandbox import apply_sandbox; "
            "r = apply_sandbox(tempfile.mkdtemp(), mode='seccomp'); "
            "ok = True\ntry:\n socket.socket(socket.AF_INET)\nexcept PermissionError:\n ok = False\n"
            "open(os.environ['OUT'], 'w').write('x'); print(json.dumps([r.landlock_abi, r.seccomp, r.caps_dropped, ok, r.warnings]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=_child_env(OUT=str(tmp_path / "w")))
    landlock, seccomp, caps, inet_ok, warnings = json.loads(out.stdout)
    assert landlock is None and seccomp and not caps and not inet_ok  # sockets still refused
    assert (tmp_path / "w").read_text() == "x" and "Landlock" in warnings[0]  # file writes are not confined


def test_the_profile_diagnostic_profiles_the_workers_scenario_loop(built: Path, tmp_path: Path) -> None:
    """ATTNQ_DIAG_PROFILE (WorkerJob.diag_profile): a real worker process (CPU launchers) verifies one scenario
    under cProfile; the stats load with pstats and name the checker's scenario run, and the text summary sits
    next to them, both written before the worker says "done" (the parent, harness/verify.py, ends the worker
    as soon as it reads that: the test kills it there too). Without the field nothing is written; a worker that
    starts at a later scenario (a verification's second worker) writes its own file and leaves the first one.
    The launchers' temporary folders go under the run's folder (``TMPDIR``), which the parent removes."""
    import pstats

    from harness.verify import _WorkerRun

    lib, sha = hostkernels.build(built)
    out = tmp_path / "prof"
    out.mkdir()
    first = b""
    for prof, first_index in ((None, 0), (out / "worker.prof", 0), (out / "worker.prof", 7)):
        job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(lib), original_lib=str(lib), candidate_sha256=sha, original_sha256=sha,
                        scenarios=[SC], seed=3, device="cpu", min_samples=3, max_samples=3, budget_ms=1e9,
                        diag_profile=str(prof) if prof else None, first_index=first_index)
        run = _WorkerRun(job, tmp_path / "worker.log")  # the worker as harness/verify.py starts it
        msgs: list = []
        while not msgs or msgs[-1] not in ("eof", None) and msgs[-1]["type"] not in ("done", "fatal", "load_error"):
            msgs.append(run.read(120))
        run.kill()  # on "done" at once, as the parent does
        assert msgs[-1] not in ("eof", None) and msgs[-1]["type"] == "done", msgs[-1]
        # the killed worker's launcher folders are in the run's folder (removed with it), not left in /tmp
        assert {p.name.rsplit("-", 1)[0] for p in (tmp_path / "tmp").iterdir()} >= {
            "attnq-original", "attnq-original-lib", "attnq-candidate", "attnq-candidate-lib"}
        (res,) = [m["result"] for m in msgs if m["type"] == "result"]
        assert res["correct"], res["message"]
        if prof is None:
            assert not list(out.iterdir())
            continue
        if first_index:
            assert prof.read_bytes() == first  # the first worker's file stays
            prof = out / f"worker.prof.{first_index}"
        else:
            first = prof.read_bytes()
        funcs = {(Path(f).name, name) for f, _, name in pstats.Stats(str(prof)).stats}  # type: ignore[attr-defined]
        assert ("checker.py", "run") in funcs and ("checker.py", "_time") in funcs
        text = Path(str(prof) + ".txt").read_text()
        assert "tottime" in text and "cumulative" in text and "checker.py" in text
