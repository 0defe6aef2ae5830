"""CPU builds of the attnq ABI (attn_host.c) for tests of the checker, the launcher and the sandbox."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from harness import KERNELS_DIR

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "attn_host.c"
#: attnq_libc_walk.h, the one copy of the libc walk, lives with the GPU corpus that includes it (tests/adversarial/)
WALK_DIR = HERE.parent / "adversarial"


def have_cc() -> bool:
    """True when a C compiler with _Float16 support is on PATH."""
    return shutil.which("gcc") is not None or shutil.which("cc") is not None


def cudart_dir() -> Path | None:
    """A directory holding libcudart.so.13 (the CUDA toolkit's or the nvidia-cuda-runtime wheel's), or None."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = [Path(p) / "cu13" / "lib" for p in (spec.submodule_search_locations or [])] if spec else []
    roots += [Path(p) for p in glob.glob("/usr/local/cuda*/lib*")]
    return next((r for r in roots if (r / "libcudart.so.13").is_file()), None)


def build(out_dir: Path, *, cheat: int = 0, probe: int = 0, draws: int = 2, probe_path: str = "",
          late_us: int = 100) -> tuple[Path, str]:
    """Build attn_host.c with ``-DCHEAT=cheat -DPROBE=probe -DDRAWS=draws -DPROBE_PATH="probe_path"
    -DLATE_US=late_us`` into ``out_dir`` (``late_us``: cheats 11 and 12, microseconds between attn_fwd's
    return and the thread's write); returns ``(library, sha256)``. Cheats 9 and 10 link the CUDA runtime
    (:func:`cudart_dir`, rpath set). Raises subprocess.CalledProcessError on a compile error."""
    cc = shutil.which("gcc") or shutil.which("cc")
    tag = f"_{hashlib.sha256(probe_path.encode()).hexdigest()[:8]}" if probe_path else ""
    late = f"_l{late_us}" if late_us != 100 else ""
    out = Path(out_dir) / f"attn_host_c{cheat}_p{probe}_d{draws}{tag}{late}.so"
    link = []
    if cheat in (9, 10):
        rt = cudart_dir()
        link = [str(rt / "libcudart.so.13"), f"-Wl,-rpath,{rt}"] if rt else []
    if not out.is_file():
        subprocess.run([cc, "-shared", "-fPIC", "-O2", f"-DCHEAT={cheat}", f"-DPROBE={probe}", f"-DDRAWS={draws}", f'-DPROBE_PATH="{probe_path}"',
                        f"-DLATE_US={late_us}",
                        "-I", str(HERE / "include"), "-I", str(WALK_DIR), "-I", str(KERNELS_DIR), str(SOURCE), "-o", str(out), "-lm", *link],
                       check=True, capture_output=True, text=True)
    return out, hashlib.sha256(out.read_bytes()).hexdigest()
