"""attnq harness: compile, scenarios, correctness, timing, isolation and the campaign store.

Usable as a library without MCP; the ``attnq`` CLI and the MCP server are thin edges over it.
"""

from pathlib import Path

__version__ = "0.1.0"

#: Root of the source tree (holds ``kernels/``); the package is installed editable (see README).
REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS_DIR = REPO_ROOT / "kernels"
ABI_HEADER = KERNELS_DIR / "attn_abi.h"
ORIGINAL_KERNEL = KERNELS_DIR / "attn_original.cu"

#: sha256 of kernels/attn_original.cu: verification refuses a modified original (every speedup is
#: relative to it). Changing the original means changing this pin in the same reviewed commit.
ORIGINAL_SOURCE_SHA256 = "badccbd10ac429fbd20ee585fd08b351d5a7e9d4c48a269d11719af48dc49148"



def child_pythonpath() -> str:
    """PYTHONPATH for a Python subprocess of attnq's (worker, launcher, sanitizer run): this checkout first,
    then the caller's own PYTHONPATH. Kept, not replaced: on a machine whose packages live on PYTHONPATH
    only (the GPU box: wheels installed to /tmp/site for /usr/bin/python3) a child without it cannot
    import pydantic or pyseccomp."""
    import os

    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


if not ABI_HEADER.is_file():  # a non-editable install does not carry kernels/
    raise ImportError(f"attnq needs its source tree ({ABI_HEADER} is missing): install it editable, "
                      "`python -m pip install -e <path to the attnq checkout>`")
