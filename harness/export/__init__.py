"""Hand a kernel over: ``export_kernel`` writes an installable package around it (FlashAttention-3's
``flash_attn_func`` and a torch custom op, :mod:`harness.export.package`); ``peer_test`` runs
FlashAttention's own forward tests against it (:mod:`harness.export.peer`).

``template/`` holds the files copied into every exported package verbatim: ``runtime.py`` (the
package's module), ``native/`` (the op's C++ CUDA kernel and its builder) and ``build_backend.py`` (its
PEP 517 backend). They are not imported by attnq.
"""

from harness.export.native_build import NativeBuild
from harness.export.package import (
    ExportedLibrary,
    ExportResult,
    export_kernel,
    parse_archs,
)

__all__ = ["ExportResult", "ExportedLibrary", "NativeBuild", "export_kernel", "parse_archs"]
