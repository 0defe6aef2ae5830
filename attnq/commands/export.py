"""``attnq export KERNEL.cu -o DIR [--name PKG] [--arch sm_90a,...] [--no-native] [--force] [--json]``.

Writes an installable Python package around the kernel (harness.export.export_kernel):
FlashAttention-3's ``flash_attn_func`` and a torch custom op. Exit 0 on success; errors (input,
compile, policy, ABI) are AttnqError, printed by attnq/cli.py with exit code 2.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` subcommand."""
    p = subparsers.add_parser(
        "export", help="package a kernel as a FlashAttention-compatible Python module and torch op",
        description="Build the kernel (harness compile path, policy on) for each arch and write an installable "
                    "package: flash_attn_func with FlashAttention-3's signature and the custom op "
                    "torch.ops.PKG.fwd (torch.compile, CUDA graphs). The op's native (C++) implementation is built "
                    "against this Python's torch and shipped (about 9 s on 2 CPU cores, 1.5 s when cached; needs a "
                    "C++ compiler and ninja): measured on an H200 it costs +4.48 us per call over a direct attn_fwd "
                    "call, the Python one +16.5 us. Install the package with pip install DIR.")
    p.add_argument("file", help="the kernel .cu file")
    p.add_argument("-o", "--output", required=True, help="directory to write (new or empty)")
    p.add_argument("--name", default=None, help="Python package and op namespace (default: attnq_<file stem>)")
    p.add_argument("--arch", default=None, help="comma list of nvcc archs (default: ATTNQ_ARCH or sm_90a), "
                                                "e.g. sm_90a,sm_100a")
    p.add_argument("--no-native", dest="native", action="store_false",
                   help="do not build the native op (saves ~9 s); the package then serves the op in Python "
                        "(PKG_NATIVE=1 or PKG.load_native() builds the native one later)")
    p.add_argument("--force", action="store_true", help="replace an earlier attnq export in DIR")
    p.add_argument("--json", action="store_true", help="print the ExportResult JSON on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: export and print what was written. Returns 0; errors propagate as AttnqError."""
    from harness.config import Settings
    from harness.export import export_kernel, parse_archs

    settings = Settings()
    archs = parse_archs(args.arch or settings.arch)
    quiet = args.json or not sys.stderr.isatty()
    res = export_kernel(args.file, args.output, name=args.name, archs=archs, cache_dir=settings.state_dir / "build",
                        force=args.force, native=args.native,
                        progress=None if quiet else lambda m: print(m, file=sys.stderr))
    if args.json:
        print(res.model_dump_json(indent=2))
        return 0
    libs = ", ".join(f"{lib.arch} ({'cached' if lib.cache_hit else f'built in {lib.build_time_s:.1f} s'})"
                     for lib in res.libraries)
    if res.native.status == "built":
        libs += f"; native op ({'cached' if res.native.cache_hit else f'built in {res.native.build_time_s:.1f} s'})"
    print(f"exported {res.name} {res.version} to {res.directory}\n"
          f"  libraries  {libs}\n"
          f"  op         {res.op}: {res.op_impl_note}\n"
          f"  install    {res.install_command}\n"
          f"  use        from {res.name} import flash_attn_func   # or {res.op}(q, k, v, softmax_scale, causal)")
    return 0
