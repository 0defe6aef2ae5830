"""A PEP 517 build backend for this package, standard library only (written by ``attnq export``).

``pip install .`` builds the wheel with it offline: no setuptools to fetch. The wheel holds the one
package directory (its module, ``kernel.json``, the prebuilt ``lib/*.so`` and, when built at export,
``native/op.so``); name, version and the torch requirement come from ``kernel.json``. Its tag is
``py3-none-<this platform>``: the libraries are CPU-architecture specific, not Python-version specific
(they are loaded with ctypes).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sysconfig
import tarfile
import zipfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def _package() -> tuple[Path, dict]:
    found = [p.parent for p in _ROOT.glob("*/kernel.json")]
    if len(found) != 1:
        raise RuntimeError(f"expected one package directory with kernel.json under {_ROOT}, found {len(found)}")
    return found[0], json.loads((found[0] / "kernel.json").read_text())


def _metadata(info: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {info['name']}", f"Version: {info['version']}",
             f"Summary: attention forward kernel {info['kernel']} exported by attnq (FlashAttention-3 interface)",
             "Requires-Python: >=3.9"]
    lines += [f"Requires-Dist: {req}" for req in info.get("requires", [])]
    return "\n".join(lines) + "\n"


def _tag() -> str:
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Write ``<name>-<version>-py3-none-<platform>.whl`` into ``wheel_directory``; return its file name."""
    pkg, info = _package()
    name = info["name"].replace("-", "_")
    dist_info = f"{name}-{info['version']}.dist-info"
    files = [(f"{pkg.name}/{p.relative_to(pkg).as_posix()}", p.read_bytes())
             for p in sorted(pkg.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    files += [(f"{dist_info}/METADATA", _metadata(info).encode()),
              (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: attnq-export\nRoot-Is-Purelib: false\n"
                                     f"Tag: {_tag()}\n".encode())]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,"]) + "\n"
    wheel_name = f"{name}-{info['version']}-{_tag()}.whl"
    out = Path(wheel_directory) / wheel_name
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for n, d in files:
            zf.writestr(n, d)
        zf.writestr(f"{dist_info}/RECORD", record)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    """Write ``<name>-<version>.tar.gz`` (this directory's files) into ``sdist_directory``."""
    _, info = _package()
    base = f"{info['name'].replace('-', '_')}-{info['version']}"
    out = Path(sdist_directory) / f"{base}.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        for p in sorted(_ROOT.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                tf.add(p, arcname=f"{base}/{p.relative_to(_ROOT).as_posix()}")
        pkg_info = io.BytesIO(_metadata(info).encode())
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info.getvalue())
        tf.addfile(ti, pkg_info)
    return out.name
