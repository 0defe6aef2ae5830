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
