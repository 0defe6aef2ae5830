"""CPU builds of the attnq ABI (attn_host.c) for tests of the checker, the launcher and the sandbox."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from harness import KERNELS_DIR

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "attn_host.c"


def have_cc() -> bool:
    """True when a C compiler with _Float16 support is on PATH."""
    return shutil.which("gcc") is not None or shutil.which("cc") is not None


def build(out_dir: Path, *, cheat: int = 0, probe: int = 0, draws: int = 2) -> tuple[Path, str]:
    """Build attn_host.c with ``-DCHEAT=cheat -DPROBE=probe -DDRAWS=draws`` into ``out_dir``; returns
    ``(library, sha256)``. Raises subprocess.CalledProcessError on a compile error."""
    cc = shutil.which("gcc") or shutil.which("cc")
    out = Path(out_dir) / f"attn_host_c{cheat}_p{probe}_d{draws}.so"
    if not out.is_file():
        subprocess.run([cc, "-shared", "-fPIC", "-O2", f"-DCHEAT={cheat}", f"-DPROBE={probe}", f"-DDRAWS={draws}",
                        "-I", str(HERE / "include"), "-I", str(KERNELS_DIR), str(SOURCE), "-o", str(out), "-lm"],
                       check=True, capture_output=True, text=True)
    return out, hashlib.sha256(out.read_bytes()).hexdigest()
