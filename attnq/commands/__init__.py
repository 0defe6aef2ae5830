"""One module per ``attnq`` subcommand; each defines ``register(subparsers)``.

A subcommand handler takes the parsed ``argparse.Namespace`` and returns the process exit code.
"""
