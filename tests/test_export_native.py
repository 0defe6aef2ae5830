"""The exported package's native op on a machine without a GPU (tests/test_export.py exports and installs).

The library ``attnq export`` built against this interpreter's torch must serve the op from import on, with
nothing compiled at run time; a copy of the package whose record names another torch, whose library was
tampered with or is not a library, with a failing compiler or ``<PKG>_NATIVE=0``, must fall back (just-in-time
build, then the Python op) and say why; a ``--no-native`` export ships none. Each check runs in a fresh
interpreter: the op's registrations are per process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import KERNELS_DIR
from harness.export import ExportResult, export_kernel
from tests.export_support import edited_copy, export_both, impl_at_import, require_native, shared_build_cache

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_build_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> dict[str, ExportResult]:
    return export_both(tmp_path_factory, build_cache)


NATIVE_CHECK = r"""
import importlib, json, sys, time, warnings
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
sys.path.insert(0, sys.argv[1])
name = sys.argv[2]
m = importlib.import_module(name)
op = getattr(torch.ops, name).fwd
def message(fn):
    try:
        fn()
        return "no error"
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
out = {"before": m.impl_info()}
t0 = time.perf_counter()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["load"] = m.load_native()
out["load_s"] = time.perf_counter() - t0
out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
out["after"] = m.impl_info()
if out["load"] == "native":
    out["kernels"] = [line for line in torch._C._dispatch_dump(f"{name}::fwd").splitlines()
                      if line.startswith(("CUDA", "CPU"))]
    with FakeTensorMode():
        fq = torch.empty(3, 9, 8, 128, dtype=torch.float16, device="cuda")
        fk = torch.empty(3, 11, 2, 128, dtype=torch.float16, device="cuda")
        o, lse = op(fq, fk, fk, 0.1, False)
        out["fake"] = [list(o.shape), str(o.device), list(lse.shape), str(lse.dtype)]
    q = torch.randn(2, 5, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 7, 2, 64, dtype=torch.bfloat16)
    graphs = []
    def backend(gm, inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward
    compiled = torch.compile(lambda a, b, c: m.flash_attn_func(a, b, c, causal=True) * 2, fullgraph=True,
                             backend=backend)
    out["compiled"] = message(lambda: compiled(q, k, k))
    out["graphs"] = graphs
    out["op_cpu"] = message(lambda: op(q, k, k, 0.125, True))
    out["func_cpu"] = message(lambda: m.flash_attn_func(q, k, k))
    # the native kernel registered for CPU tensors too: its checks hand every input it does not serve to the
    # Python implementation (torch.ops.<name>._fwd_python), whose exceptions come back unchanged
    m._native.register(name, "CPU")
    out["kernels_cpu"] = [line for line in torch._C._dispatch_dump(f"{name}::fwd").splitlines()
                          if line.startswith("CPU:")]
    cases = {"cpu": (q, k, k), "3d": (q[0], k, k), "float32": (q.float(), k.float(), k.float()),
             "head_dim_v": (q, k, torch.randn(2, 7, 2, 32, dtype=torch.bfloat16)), "mixed": (q, k.half(), k.half()),
             "heads": (q, torch.randn(2, 7, 3, 64, dtype=torch.bfloat16), torch.randn(2, 7, 3, 64, dtype=torch.bfloat16))}
    out["native_cpu"] = {c: [message(lambda: op(*a, 0.125, True)), message(lambda: m._fwd_impl(*a, 0.125, True))]
                         for c, a in cases.items()}
print(json.dumps(out))
"""


def _native_check(directory: str, name: str, tmp_path: Path, ext_dir: Path, **env: str) -> dict:
    """NATIVE_CHECK on the package in ``directory`` in a fresh interpreter (the op's registrations are per
    process); just-in-time builds go under ``ext_dir``."""
    (tmp_path / "native_check.py").write_text(NATIVE_CHECK)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "TORCH_EXTENSIONS_DIR")}
    run_env.update(TORCH_EXTENSIONS_DIR=str(ext_dir), **env)
    proc = subprocess.run([sys.executable, "native_check.py", directory, name], capture_output=True,
                          text=True, cwd=tmp_path, timeout=600, env=run_env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_native_kernel(out: dict, name: str) -> None:
    """NATIVE_CHECK's findings once the native op serves: registrations, fake, graph, the errors unchanged."""
    assert len(out["kernels"]) == 2 and "native/op.cpp" in out["kernels"][1] and out["kernels"][1].startswith("CUDA:")
    assert "native/op.cpp" not in out["kernels"][0]  # CPU: the Python implementation (the plain no-GPU error)
    assert out["fake"] == [[3, 9, 8, 128], "cuda:0", [3, 8, 9], "torch.float32"]
    assert out["graphs"] == [[f"{name}.fwd.default", "<built-in function getitem>", "<built-in function mul>"]]
    for key in ("compiled", "op_cpu", "func_cpu"):
        assert out[key][0] == "NoGpuError" and out[key][1].startswith(f"{name}: no CUDA GPU is available"), key
    assert len(out["kernels_cpu"]) == 1 and "native/op.cpp" in out["kernels_cpu"][0]
    kinds = {case: got[0][0] for case, got in out["native_cpu"].items()}
    assert kinds == {"cpu": "NoGpuError", "3d": "ValueError", "float32": "UnsupportedArgument",
                     "head_dim_v": "UnsupportedArgument", "mixed": "ValueError", "heads": "ValueError"}
    for case, (native_error, python_error) in out["native_cpu"].items():
        assert native_error == python_error, case  # same class, same message


def test_the_shipped_native_op_serves_from_import_and_keeps_the_fake_and_the_errors(
        exported: dict[str, ExportResult], tmp_path: Path) -> None:
    """The library built at export (this torch) is the op's CUDA kernel from import on, with nothing compiled
    at run time; the fake, the torch.compile graph and the errors are the Python implementation's."""
    res = exported["attn_fast.cu"]
    require_native(res)
    ext = tmp_path / "ext"
    out = _native_check(res.directory, res.name, tmp_path, ext)
    shipped = str(Path(res.directory) / res.name / "native" / "op.so")
    assert out["before"] == {"impl": "native", "source": "shipped", "library": shipped, "reason": None}, out
    assert (out["load"], out["warnings"], out["after"]) == ("native", [], out["before"])
    assert out["load_s"] < 1.0  # nothing to build
    _check_native_kernel(out, res.name)
    assert not list(ext.rglob("*.so"))


def test_a_record_of_another_torch_falls_back_to_the_just_in_time_build(exported: dict[str, ExportResult],
                                                                        tmp_path: Path) -> None:
    """A copy whose kernel.json says its library was built for another torch: not loaded (the reason names both
    versions); load_native() builds op.cpp just in time, which then serves; a second process reuses that build."""
    import torch

    res = exported["attn_fast.cu"]
    require_native(res)
    copy = edited_copy(res, tmp_path / "other_torch", lambda m, _: m["native"].update(torch="0.0.0+other"))
    ext = tmp_path / "ext"
    out = _native_check(str(copy), res.name, tmp_path, ext)
    before = out["before"]
    assert (before["impl"], before["source"], before["library"]) == ("python", None, None), out
    assert f"torch: built for '0.0.0+other', this process has {torch.__version__!r}" in before["reason"]
    assert "the native op is built on the first use on a GPU" in before["reason"]
    assert (out["load"], out["warnings"]) == ("native", []), out
    after = out["after"]
    assert after["impl"] == "native" and after["source"] == "jit" and Path(after["library"]).is_relative_to(ext)
    assert "0.0.0+other" in after["reason"]
    _check_native_kernel(out, res.name)
    builds = {p: p.stat().st_mtime_ns for p in ext.rglob("*.so")}
    assert len(builds) == 1
    again = _native_check(str(copy), res.name, tmp_path, ext)
    assert again["load"] == "native" and again["warnings"] == [] and again["after"]["source"] == "jit"
    assert {p: p.stat().st_mtime_ns for p in ext.rglob("*.so")} == builds  # reused, not rebuilt


def test_the_native_op_falls_back_to_python_with_one_warning(exported: dict[str, ExportResult],
                                                             tmp_path: Path) -> None:
    """A shipped library that is not the recorded one and a compiler that fails: one RuntimeWarning naming both
    reasons, the Python implementation stays; ``<PKG>_NATIVE=0``: no attempt, no warning, nothing written."""
    res = exported["attn_original.cu"]
    require_native(res)

    def tamper(_: dict, pkg: Path) -> None:
        with (pkg / "native" / "op.so").open("ab") as f:
            f.write(b"\0")

    copy = edited_copy(res, tmp_path / "tampered", tamper)
    broken = _native_check(str(copy), res.name, tmp_path, tmp_path / "ext_broken", CXX="/bin/false")
    assert (broken["before"]["impl"], broken["load"]) == ("python", "python") and len(broken["warnings"]) == 1
    assert "native/op.so differs from the library recorded in kernel.json" in broken["before"]["reason"]
    warning = broken["warnings"][0]
    assert warning.startswith(f"{res.name}: the native op is not available (shipped library: native/op.so differs")
    assert "build: the build failed" in warning and broken["after"]["reason"] in warning
    assert f"{res.name.upper()}_NATIVE=0" in warning
    env = f"{res.name.upper()}_NATIVE"
    off = _native_check(res.directory, res.name, tmp_path, tmp_path / "ext_off", **{env: "0"})
    assert off["before"] == off["after"] == {"impl": "python", "source": None, "library": None,
                                             "reason": f"disabled by {env}=0"}
    assert (off["load"], off["warnings"]) == ("python", [])
    assert not (tmp_path / "ext_off").exists()


def test_no_native_export_and_a_library_the_loader_refuses(exported: dict[str, ExportResult], tmp_path: Path,
                                                           build_cache: Path) -> None:
    """--no-native: no library shipped, the Python op serves (no build unless asked). A shipped file the loader
    refuses (sha256 recorded, not a library): the Python op for now, the reason says the loader's complaint."""
    res = export_kernel(KERNELS_DIR / "attn_original.cu", tmp_path / "nn", name="no_native_pkg", native=False,
                        cache_dir=build_cache)
    assert (res.native.status, res.op_impl) == ("skipped", "python") and "--no-native" in res.op_impl_note
    assert f"{res.name}/native/op.so" not in res.files and f"{res.name}/native/op.cpp" in res.files
    manifest = json.loads((Path(res.directory) / res.name / "kernel.json").read_text())
    assert manifest["native"] == {"status": "skipped", "reason": "exported with --no-native"}
    info = impl_at_import(Path(res.directory), res.name)
    assert (info["impl"], info["source"]) == ("python", None)
    assert info["reason"] == ("shipped library: exported with --no-native; NO_NATIVE_PKG_NATIVE=1 or load_native() "
                              "builds the native op")
    asked = impl_at_import(Path(res.directory), res.name, NO_NATIVE_PKG_NATIVE="1")
    assert asked["impl"] == "python" and "built on the first use on a GPU" in asked["reason"]

    shipped = exported["attn_original.cu"]
    require_native(shipped)

    junk = b"not a shared library\n" * 200

    def not_a_library(m: dict, pkg: Path) -> None:
        (pkg / "native" / "op.so").write_bytes(junk)
        m["native"]["sha256"] = hashlib.sha256(junk).hexdigest()

    copy = edited_copy(shipped, tmp_path / "refused", not_a_library)
    info = impl_at_import(copy, shipped.name)
    assert info["impl"] == "python" and "op.so: invalid ELF header" in info["reason"], info


def test_an_export_whose_native_build_fails_still_writes_the_package(tmp_path: Path, build_cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler that fails at export: the package is written without a library, says why, and builds the
    native op on the first use on a GPU instead (its reason at import says so)."""
    monkeypatch.setenv("CXX", "/bin/false")
    res = export_kernel(KERNELS_DIR / "attn_original.cu", tmp_path / "nobuild", name="nobuild_pkg",
                        cache_dir=build_cache)
    assert (res.native.status, res.op_impl) == ("unavailable", "python")
    assert res.native.reason.startswith("not built at export: the build failed"), res.native
    assert f"{res.name}/native/op.so" not in res.files and res.native.reason in res.op_impl_note
    manifest = json.loads((Path(res.directory) / res.name / "kernel.json").read_text())
    assert manifest["native"] == {"status": "unavailable", "reason": res.native.reason}
    info = impl_at_import(Path(res.directory), res.name)
    assert info["impl"] == "python" and info["reason"] == (f"shipped library: {res.native.reason}; the native op is "
                                                           "built on the first use on a GPU (or by load_native())")
