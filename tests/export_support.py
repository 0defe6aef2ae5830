"""Shared pieces of the ``attnq export`` CPU tests (tests/test_export.py, tests/test_export_native.py): the
session's build cache, both kernels exported (once per module: the second module's exports take the kernel
libraries and the native op from that cache), and helpers for the package's native op."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import KERNELS_DIR
from harness.export import ExportResult, export_kernel
from harness.export.package import TEMPLATE_DIR

KERNELS = ["attn_original.cu", "attn_fast.cu"]


def shared_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's shared build cache (the MCP tests use the same one)."""
    shared = tmp_path_factory.getbasetemp() / "attnq-shared-build"
    shared.mkdir(exist_ok=True)
    return shared


def export_both(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> dict[str, ExportResult]:
    """Both kernels exported (native op included) into a new temporary directory, keyed by file name."""
    out = tmp_path_factory.mktemp("exports")
    return {k: export_kernel(KERNELS_DIR / k, out / Path(k).stem, cache_dir=build_cache) for k in KERNELS}


def template_native():  # type: ignore[no-untyped-def]
    """template/native/__init__.py as a module of its own (its toolchain checks need only torch)."""
    spec = importlib.util.spec_from_file_location("attnq_template_native", TEMPLATE_DIR / "native" / "__init__.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def require_native(res: ExportResult) -> None:
    """Skip when this machine truly cannot build the native op; a build that should have worked fails."""
    if res.native.status != "built":
        problem = template_native().toolchain_problem()
        if problem is None:
            pytest.fail(f"the toolchain is here but the export did not build the native op: {res.native.reason}")
        pytest.skip(f"the native op cannot be built here: {problem}")


def impl_at_import(directory: Path, name: str, **env: str) -> dict:
    """``impl_info()`` right after ``import <name>`` from ``directory`` in a fresh interpreter."""
    script = "import json, sys; sys.path.insert(0, sys.argv[1]); m = __import__(sys.argv[2]); print(json.dumps(m.impl_info()))"
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([sys.executable, "-c", script, str(directory), name], capture_output=True, text=True,
                          timeout=300, env={**run_env, **env}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def edited_copy(res: ExportResult, target: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the exported package project with ``edit(manifest, package_dir)`` applied to kernel.json."""
    shutil.copytree(res.directory, target)
    path = target / res.name / "kernel.json"
    manifest = json.loads(path.read_text())
    edit(manifest, target / res.name)
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return target
