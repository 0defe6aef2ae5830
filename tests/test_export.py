"""``attnq export`` and ``attnq peer-test`` on a machine without a GPU.

The original and the fast kernel are exported for real (nvcc, policy on), the package is built and
installed with pip into a fresh virtual environment (``--system-site-packages`` plus a ``.pth`` line
for this interpreter's packages, so torch is not reinstalled; no index, no network) and imported
there, where attnq itself is not importable: its signature must be FlashAttention-3's (written down in
tests/data/export/fa3_flash_attn_func.json, checked against FA3's own source when the archive in
shared/anchors/fa3 is at hand), each unsupported argument must raise NotImplementedError naming it,
torch.compile(fullgraph=True) must trace it into one graph holding the custom op, and calls must end
in the plain no-GPU message. The op's native library is built at export against this interpreter's
torch and shipped: the installed package must serve it from import on; a copy whose record names another
torch, or whose library was tampered with, must fall back (just-in-time build, then the Python op) and
say why. peer-test runs on a test file written like FlashAttention's.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness import KERNELS_DIR, REPO_ROOT
from harness.errors import InputError, NoGpuError
from harness.export import ExportResult, export_kernel
from harness.export.package import TEMPLATE_DIR
from harness.export.peer import peer_test
from tests.export_support import KERNELS, export_both, require_native, shared_build_cache

DATA = Path(__file__).parent / "data" / "export"
SIGNATURE = json.loads((DATA / "fa3_flash_attn_func.json").read_text())

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_build_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> dict[str, ExportResult]:
    return export_both(tmp_path_factory, build_cache)


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv that sees this interpreter's packages (torch, pip) through a .pth file, not attnq's checkout."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parents = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(purelib) / "parent_site.pth").write_text("\n".join(parents) + "\n")
    return python


def test_export_writes_a_package_and_a_manifest(exported: dict[str, ExportResult]) -> None:
    import torch

    res = exported["attn_original.cu"]
    require_native(res)
    root = Path(res.directory)
    assert res.name == "attnq_attn_original" and res.op == "torch.ops.attnq_attn_original.fwd"
    assert set(res.files) == {"README.md", "build_backend.py", "pyproject.toml", f"{res.name}/__init__.py",
                              f"{res.name}/kernel.json", f"{res.name}/lib/sm_90a.so",
                              f"{res.name}/native/__init__.py", f"{res.name}/native/op.cpp",
                              f"{res.name}/native/attn_abi.h", f"{res.name}/native/op.so"}
    assert (root / res.name / "native" / "attn_abi.h").read_bytes() == (KERNELS_DIR / "attn_abi.h").read_bytes()
    manifest = json.loads((root / res.name / "kernel.json").read_text())
    source = (KERNELS_DIR / "attn_original.cu").read_bytes()
    assert manifest["source_sha256"] == hashlib.sha256(source).hexdigest() == res.source_sha256
    lib = root / res.name / manifest["libraries"]["sm_90a"]["file"]
    assert hashlib.sha256(lib.read_bytes()).hexdigest() == manifest["libraries"]["sm_90a"]["sha256"]
    assert manifest["abi_version"] == res.abi_version == 1 and manifest["version"] == res.version
    assert f'name = "{res.name}"' in (root / "pyproject.toml").read_text()
    assert "flash_attn_func" in (root / "README.md").read_text()
    native = manifest["native"]
    shipped = root / res.name / "native" / "op.so"
    assert native["status"] == "built" and native["file"] == "native/op.so" and res.op_impl == "native"
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == native["sha256"] == res.native.sha256
    assert (native["torch"], native["torch_cuda"], native["cxx11_abi"]) == (
        torch.__version__, torch.version.cuda, bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    digest = hashlib.sha256()
    for path in (TEMPLATE_DIR / "native" / "op.cpp", KERNELS_DIR / "attn_abi.h"):
        digest.update(path.read_bytes() + b"\0")
    assert native["sources_sha256"] == digest.hexdigest()
    assert native["machine"] == os.uname().machine and "build_time_s" not in native
    assert shipped.read_bytes()[:4] == b"\x7fELF"
    assert f"native (C++) op, shipped for torch {torch.__version__}" in res.op_impl_note
    # the second kernel's export took the same library from the build cache
    fast = exported["attn_fast.cu"]
    assert fast.native.sha256 == res.native.sha256 and (fast.native.cache_hit or res.native.cache_hit)


def test_the_wheel_records_every_file_with_its_hash(exported: dict[str, ExportResult], tmp_path: Path) -> None:
    res = exported["attn_fast.cu"]
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import build_backend; "
              "print(build_backend.build_wheel(sys.argv[2]))")
    name = subprocess.run([sys.executable, "-c", script, res.directory, str(tmp_path)], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert name.startswith(f"{res.name}-{res.version}-py3-none-") and name.endswith(".whl")
    with zipfile.ZipFile(tmp_path / name) as zf:
        names = set(zf.namelist())
        record = zf.read(f"{res.name}-{res.version}.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = zf.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
    assert {f"{res.name}/__init__.py", f"{res.name}/lib/sm_90a.so", f"{res.name}/kernel.json",
            f"{res.name}/native/op.cpp", f"{res.name}/native/attn_abi.h"} <= names
    assert (f"{res.name}/native/op.so" in names) == (res.native.status == "built")
    assert len(record) == len(names)


VENV_CHECK = r'''
import importlib, importlib.util, inspect, json, sys
import torch
name = sys.argv[1]
m = importlib.import_module(name)
out = {"file": m.__file__, "attnq_visible": importlib.util.find_spec("harness") is not None,
       "signature": [[p.name, p.kind.name, None if p.default is p.empty else repr(p.default)]
                     for p in inspect.signature(m.flash_attn_func).parameters.values()]}
q = torch.randn(2, 5, 4, 64, dtype=torch.bfloat16)
k = torch.randn(2, 7, 2, 64, dtype=torch.bfloat16)
bad = {"qv": {"qv": q}, "q_descale": {"q_descale": torch.ones(2, 2)}, "k_descale": {"k_descale": torch.ones(2, 2)},
       "v_descale": {"v_descale": torch.ones(2, 2)}, "window_size": {"window_size": (16, 0)},
       "attention_chunk": {"attention_chunk": 64}, "softcap": {"softcap": 15.0}}
out["unsupported"] = {}
for arg, kwargs in bad.items():
    try:
        m.flash_attn_func(q, k, k, **kwargs)
        out["unsupported"][arg] = "no error"
    except NotImplementedError as exc:
        out["unsupported"][arg] = [exc.arguments, str(exc)]
for arg, args in {"head_dim_v": (q, k, torch.randn(2, 7, 2, 128, dtype=torch.bfloat16)),
                  "dtype": (q.float(), k.float(), k.float())}.items():
    try:
        m.flash_attn_func(*args)
        out["unsupported"][arg] = "no error"
    except NotImplementedError as exc:
        out["unsupported"][arg] = [exc.arguments, str(exc)]
def message(fn):
    try:
        fn()
        return "no error"
    except Exception as exc:
        return [type(exc).__name__, isinstance(exc, RuntimeError), str(exc)]
out["no_gpu"] = message(lambda: m.flash_attn_func(q, k, k, causal=True, num_splits=3, pack_gqa=True,
                                                  deterministic=True, sm_margin=4, return_attn_probs=True))
out["op_no_gpu"] = message(lambda: getattr(torch.ops, name).fwd(q, k, k, 0.125, True))
out["grad_no_gpu"] = message(lambda: m.flash_attn_func(q.requires_grad_(), k, k))
graphs = []
def backend(gm, inputs):
    graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
    return gm.forward
compiled = torch.compile(lambda a, b, c: m.flash_attn_func(a, b, c, causal=True) * 2, fullgraph=True, backend=backend)
out["compiled_no_gpu"] = message(lambda: compiled(q.detach(), k, k))
out["graphs"] = graphs
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    fq = torch.empty(3, 9, 8, 128, dtype=torch.float16, device="cuda")
    fk = torch.empty(3, 11, 2, 128, dtype=torch.float16, device="cuda")
    o, lse = getattr(torch.ops, name).fwd(fq, fk, fk, 0.1, False)
    out["fake"] = [list(o.shape), str(o.dtype), str(o.device), list(o.stride()), list(lse.shape), str(lse.dtype)]
out["impl"] = [m.impl_kind(), m.impl_info()]  # nothing above used a GPU: no just-in-time build was attempted
print(json.dumps(out))
'''


@pytest.mark.parametrize("kernel", KERNELS)
def test_installs_in_a_fresh_venv_and_imports_without_gpu(kernel: str, exported: dict[str, ExportResult],
                                                          venv_python: Path, tmp_path: Path) -> None:
    res = exported[kernel]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    pip = subprocess.run([str(venv_python), "-m", "pip", "install", "-q", "--no-index", res.directory],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env, check=False)
    assert pip.returncode == 0, pip.stderr[-2000:]
    (tmp_path / "check.py").write_text(VENV_CHECK)
    proc = subprocess.run([str(venv_python), "check.py", res.name], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(venv_python.parent.parent) and not out["attnq_visible"]
    assert out["signature"] == [[p["name"], p["kind"], p["default"]] for p in SIGNATURE["parameters"]]
    assert set(out["unsupported"]) == set(SIGNATURE["unsupported"])
    for arg, got in out["unsupported"].items():
        assert got != "no error" and got[0] == [arg] and arg in got[1], (arg, got)
    for key in ("no_gpu", "op_no_gpu", "grad_no_gpu", "compiled_no_gpu"):
        kind, is_runtime_error, text = out[key]
        assert kind == "NoGpuError" and is_runtime_error, (key, out[key])
        assert text.startswith(f"{res.name}: no CUDA GPU is available") and "sm_90a" in text
    assert out["graphs"] == [[f"{res.name}.fwd.default", "<built-in function getitem>", "<built-in function mul>"]]
    assert out["fake"] == [[3, 9, 8, 128], "torch.float16", "cuda:0", [9216, 1024, 128, 1], [3, 8, 9], "torch.float32"]
    kind, info = out["impl"]
    if res.native.status == "built":  # torch is the exporting one: the shipped library serves from import on
        assert kind == info["impl"] == "native" and info["source"] == "shipped" and info["reason"] is None, info
        assert Path(info["library"]).is_relative_to(venv_python.parent.parent), info
    else:
        assert kind == "python" and res.native.reason in info["reason"], info


def _fa3_archive() -> Path | None:
    for shared in (REPO_ROOT.parent / "shared", REPO_ROOT.parent.parent / "shared"):
        found = sorted((shared / "anchors" / "fa3").glob("flash_attn_3-*.tgz"))
        if found:
            return found[-1]
    return None


def test_signature_data_is_fa3s_own() -> None:
    """The data file says what FA3's hopper/flash_attn_interface.py says (read with ast, never imported)."""
    archive = _fa3_archive()
    if archive is None:
        pytest.skip("shared/anchors/fa3/flash_attn_3-*.tgz is not beside the checkout")
    with tarfile.open(archive) as tf:
        member = next(m for m in tf.getmembers() if m.name.lstrip("./") == "flash_attn_interface.py")
        source = tf.extractfile(member).read().decode()  # type: ignore[union-attr]
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "flash_attn_func")
    args = fn.args
    assert not (args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg)
    defaults = [None] * (len(args.args) - len(args.defaults)) + [repr(ast.literal_eval(d)) for d in args.defaults]
    got = [[a.arg, "POSITIONAL_OR_KEYWORD", d] for a, d in zip(args.args, defaults, strict=True)]
    assert got == [[p["name"], p["kind"], p["default"]] for p in SIGNATURE["parameters"]]


def _import(res: ExportResult):  # type: ignore[no-untyped-def]
    """The exported package, imported in this process from its directory."""
    sys.path.insert(0, res.directory)
    try:
        return importlib.import_module(res.name)
    finally:
        sys.path.remove(res.directory)


def test_params_layout_is_the_abis(exported: dict[str, ExportResult]) -> None:
    """The package packs attn_fwd_params with struct; the bytes must equal harness.abi's ctypes mirror."""
    import ctypes

    from harness.abi import AttnFwdParams

    mod = _import(exported["attn_original.cu"])
    assert mod.PARAMS_BYTES == ctypes.sizeof(AttnFwdParams)
    values = [1, 0, *range(0x1000, 0x1005), *range(100, 112), 2, 333, 444, 16, 4, 128, 0.08838834764831845, 1,
              0xABC000, 4096, 132]
    buf = ctypes.create_string_buffer(mod.PARAMS_BYTES)
    mod._PARAMS.pack_into(buf, 0, *values)
    p = AttnFwdParams()
    for (field, _), value in zip(AttnFwdParams._fields_[:-1], values, strict=True):
        setattr(p, field, value)
    assert bytes(buf) == ctypes.string_at(ctypes.addressof(p), ctypes.sizeof(p))


def test_the_library_loads_and_reads_the_packed_params(exported: dict[str, ExportResult]) -> None:
    """Without a GPU the library still loads (ABI and sha256 checked) and its host code answers
    attn_fwd_workspace_bytes: from the package's packed params exactly as from harness.abi's."""
    import torch

    from harness.abi import load_kernel, make_params

    mod = _import(exported["attn_fast.cu"])
    info = mod.MANIFEST["libraries"]["sm_90a"]
    kern = mod._Kernel("sm_90a", mod._HERE / info["file"], info["sha256"])
    harness_lib = load_kernel(mod._HERE / info["file"])
    buf, addr = mod._params_buffer()
    asked = []
    for b, sq, sk, hq, hk, d, causal in [(1, 1, 8192, 32, 8, 128, False), (2, 1024, 1024, 16, 16, 64, True),
                                         (3, 4, 2000, 32, 1, 64, True)]:
        q = torch.empty(b, sq, hq, d, dtype=torch.bfloat16)
        k = torch.empty(b, sk, hk, d, dtype=torch.bfloat16)
        lse = torch.empty(b, hq, sq)
        p = make_params(q, k, k, q, lse, softmax_scale=d ** -0.5, causal=causal, num_sms=132)
        mod._PARAMS.pack_into(buf, 0, *(getattr(p, f) or 0 for f, _ in type(p)._fields_[:-1]))
        asked.append(int(kern.ws(addr)))
        assert asked[-1] == harness_lib.workspace_bytes(p)
    assert asked[0] > 0 and asked[1] == 0  # split-KV decode asks for scratch, a long prefill does not
    assert kern.launch_error() is None or "cudaError" in kern.launch_error()
    with pytest.raises(RuntimeError, match="differs from the library recorded in kernel.json"):
        mod._Kernel("sm_90a", mod._HERE / info["file"], "0" * 64)
    fits = {(arch, cc): mod._arch_fits(arch, *cc) for arch in ("sm_90a", "sm_90", "sm_100f", "sm_100a")
            for cc in ((9, 0), (9, 1), (10, 0), (10, 3))}
    assert [key for key, ok in fits.items() if ok] == [("sm_90a", (9, 0)), ("sm_90", (9, 0)), ("sm_90", (9, 1)),
                                                      ("sm_100f", (10, 0)), ("sm_100f", (10, 3)),
                                                      ("sm_100a", (10, 0))]


def test_export_refuses_bad_input_and_loses_nothing(tmp_path: Path, build_cache: Path) -> None:
    src = KERNELS_DIR / "attn_original.cu"
    for kwargs, needle in [({"name": "2fast"}, "Python identifier"), ({"name": "torch"}, "shadow"),
                           ({"name": "class"}, "Python keyword"), ({"name": ""}, "Python identifier"), ({"archs": ["sm90"]}, "sm_90a"),
                           ({"archs": [" ", ""]}, "names no arch")]:
        with pytest.raises(InputError, match=needle):
            export_kernel(src, tmp_path / "new", cache_dir=build_cache, **kwargs)
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for force in (False, True):
        with pytest.raises(InputError, match="not empty"):
            export_kernel(src, mine, cache_dir=build_cache, force=force)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    with pytest.raises(InputError, match="no such file"):
        export_kernel(tmp_path / "missing.cu", tmp_path / "x", cache_dir=build_cache)
    assert not list(tmp_path.glob(".*tmp*"))


def test_force_replaces_an_earlier_export(tmp_path: Path, build_cache: Path) -> None:
    src = KERNELS_DIR / "attn_original.cu"
    first = export_kernel(src, tmp_path / "pkg", name="first_name", cache_dir=build_cache)
    (Path(first.directory) / "stale.txt").write_text("from before")
    second = export_kernel(src, tmp_path / "pkg", name="second_name", cache_dir=build_cache, force=True)
    assert sorted(p.name for p in Path(second.directory).iterdir()) == ["README.md", "build_backend.py",
                                                                       "pyproject.toml", "second_name"]
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]


def _peer_checkout(tmp_path: Path, text: str | None = None) -> Path:
    """A throwaway 'checkout' holding one FlashAttention-style test file."""
    hopper = tmp_path / "flash-attention" / "hopper"
    hopper.mkdir(parents=True)
    target = hopper / "test_flash_attn.py"
    target.write_text(text if text is not None else (DATA / "fa_style_tests.py").read_text())
    return target


def test_peer_test_reports_passes_skips_with_reasons_and_failures(tmp_path: Path, build_cache: Path) -> None:
    seen = []
    report = peer_test(KERNELS_DIR / "attn_original.cu", _peer_checkout(tmp_path), select="test_",
                       work_dir=tmp_path / "work", cache_dir=build_cache, require_gpu=False, progress=seen.append)
    assert report.status == "fail" and report.message == "2 of 7 tests failed"
    assert (report.collected, report.passed, report.skipped, report.failed, report.errors) == (7, 1, 4, 2, 0)
    assert report.skip_reasons == {
        "unsupported by the kernel: softcap": 1,
        "flash_attn_varlen_func is not part of the exported interface (attnq exports flash_attn_func)": 1,
        "no call reached the kernel: head_dim_v != head_dim (answered by attnq's fp32 reference, not counted)": 1,
        "Has Qv requires hdim 64": 1,
    }
    assert report.reference_calls == {"head_dim_v != head_dim (answered by attnq's fp32 reference, not counted)": 2}
    assert report.candidate_calls == 0
    failed = {f.nodeid.split("::")[-1]: f for f in report.failures}
    assert set(failed) == {"test_output[64]", "test_loops_over_head_dim_v"}
    assert all("NoGpuError" in f.message and "no CUDA GPU is available" in f.message for f in failed.values())
    assert sum(failed["test_loops_over_head_dim_v"].reference_calls.values()) == 1
    assert report.disabled_features["FLASH_ATTENTION_DISABLE_BACKWARD"] == "the export is forward only"
    assert seen[0].message.startswith("exporting") and seen[-1].done == 7 and seen[-1].total == 7
    assert "2 failed, 1 passed, 4 skipped" in Path(report.log_file).read_text()


def test_peer_test_says_when_the_test_file_does_not_import(tmp_path: Path, build_cache: Path) -> None:
    text = "import einops_that_is_not_installed\n\ndef test_x():\n    pass\n"
    report = peer_test(KERNELS_DIR / "attn_original.cu", _peer_checkout(tmp_path, text), work_dir=tmp_path / "w",
                       cache_dir=build_cache, require_gpu=False)
    assert report.status == "error" and report.passed == 0
    assert "did not import" in report.message and "einops_that_is_not_installed" in report.message


def test_peer_test_refuses_bad_input(tmp_path: Path, build_cache: Path) -> None:
    kernel = KERNELS_DIR / "attn_original.cu"
    for path, needle in [(tmp_path / "nope.py", "no such file"), (tmp_path, "one pytest file")]:
        with pytest.raises(InputError, match=needle):
            peer_test(kernel, path, work_dir=tmp_path / "w", cache_dir=build_cache, require_gpu=False)
    target = _peer_checkout(tmp_path)
    with pytest.raises(InputError, match="select is empty"):
        peer_test(kernel, target, select=" ", work_dir=tmp_path / "w", require_gpu=False)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(NoGpuError, match="NVIDIA GPU"):
            peer_test(kernel, target, work_dir=tmp_path / "w", cache_dir=build_cache)


def _attnq(*args: str, cwd: Path, state: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNQ_")}
    env.update(ATTNQ_STATE=str(state), PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "attnq", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600, check=False)


def test_cli_export_and_peer_test(tmp_path: Path, build_cache: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "build").symlink_to(build_cache, target_is_directory=True)
    ok = _attnq("export", str(KERNELS_DIR / "attn_original.cu"), "-o", "pkg", "--name", "my_attn", cwd=tmp_path,
                state=state)
    assert ok.returncode == 0, ok.stderr
    assert "exported my_attn 0.1.0+src" in ok.stdout and f"install    python -m pip install {tmp_path / 'pkg'}" in ok.stdout
    native = json.loads((tmp_path / "pkg" / "my_attn" / "kernel.json").read_text())["native"]
    if native["status"] == "built":
        assert f"op         torch.ops.my_attn.fwd: native (C++) op, shipped for torch {native['torch']}" in ok.stdout
    else:
        assert "op         torch.ops.my_attn.fwd: Python op until the native one builds" in ok.stdout
    plain = _attnq("export", str(KERNELS_DIR / "attn_original.cu"), "-o", "plain", "--no-native", "--json",
                   cwd=tmp_path, state=state)
    assert plain.returncode == 0, plain.stderr
    res = json.loads(plain.stdout)
    assert (res["native"]["status"], res["op_impl"]) == ("skipped", "python") and "--no-native" in res["op_impl_note"]
    assert not (tmp_path / "plain" / res["name"] / "native" / "op.so").exists()
    again = _attnq("export", str(KERNELS_DIR / "attn_original.cu"), "-o", "pkg", "--json", cwd=tmp_path, state=state)
    assert again.returncode == 2 and json.loads(again.stdout)["error"] == "input_error"
    bad_arch = _attnq("export", str(KERNELS_DIR / "attn_original.cu"), "-o", "p2", "--arch", "sm_90a,hopper",
                      cwd=tmp_path, state=state)
    assert bad_arch.returncode == 2 and "attnq export: arch must look like sm_90a" in bad_arch.stderr
    import torch

    if not torch.cuda.is_available():
        target = _peer_checkout(tmp_path)
        peer = _attnq("peer-test", str(KERNELS_DIR / "attn_original.cu"), "--fa-tests", str(target), cwd=tmp_path,
                      state=state)
        assert peer.returncode == 3 and "attnq peer-test: peer-test runs FlashAttention's tests on an NVIDIA GPU; the " \
            "CUDA driver shows none here" in peer.stderr
        # the kernel's own errors come before the GPU's absence (as in `attnq verify`): a typo is said as one
        missing = _attnq("peer-test", "nonexist.cu", "--fa-tests", str(target), cwd=tmp_path, state=state)
        assert missing.returncode == 2 and "nonexist.cu: no such file" in missing.stderr, missing.stderr


def test_mcp_peer_test_tools(tmp_path: Path, build_cache: Path) -> None:
    import anyio
    import torch
    from mcp.client import Client

    from harness.config import Settings
    from mcp_server.server import build_server

    ws = tmp_path / "ws"
    (ws / ".attnq").mkdir(parents=True)
    (ws / ".attnq" / "build").symlink_to(build_cache, target_is_directory=True)
    shutil.copy(KERNELS_DIR / "attn_original.cu", ws / "cand.cu")
    _peer_checkout(ws)
    server = build_server(Settings(workspace=ws))

    async def go(c):  # type: ignore[no-untyped-def]
        run = await c.call_tool("peer_test", {"path": "cand.cu", "fa_tests": "flash-attention/hopper/test_flash_attn.py"})
        outside = await c.call_tool("peer_test", {"path": "cand.cu", "fa_tests": str(tmp_path / "elsewhere.py")})
        unknown = await c.call_tool("get_peer_test", {"job_id": "deadbeef"})
        return run, outside, unknown

    run, outside, unknown = anyio.run(lambda: _with_client(Client(server), go))
    assert outside.is_error and "outside the workspace" in outside.content[0].text
    assert unknown.is_error and "no peer-test run 'deadbeef'" in unknown.content[0].text
    if not torch.cuda.is_available():
        assert run.is_error and "[no_gpu] peer-test runs FlashAttention's tests" in run.content[0].text


async def _with_client(client, fn):  # type: ignore[no-untyped-def]
    async with client as c:
        return await fn(c)
