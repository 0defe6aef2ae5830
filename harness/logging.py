"""structlog set-up: JSON lines on stderr (stdout belongs to the MCP protocol and to CLI output)."""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False
#: The levels ``ATTNQ_LOG_LEVEL`` (and ``--log-level``) take.
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging(level: str | None = None, path: str | None = None) -> None:
    """Configure structlog once: JSON to stderr, or to ``path`` (``ATTNQ_LOG_FILE``) when given.

    ``level`` defaults to ``ATTNQ_LOG_LEVEL`` or ``warning`` (an unknown name: one warning line on stderr,
    then ``warning``). A call with an explicit ``level`` (the CLI's ``--log-level``) configures again even after
    a module's first logger configured the default: loggers log with the configuration in force at their first
    message. A log file that cannot be opened (missing
    directory, no permission, ``/proc``) is not fatal: one warning line goes to stderr and logs stay on
    stderr.
    """
    global _configured
    if _configured and level is None:
        return
    name = (level or os.environ.get("ATTNQ_LOG_LEVEL", "warning")).upper()
    if name not in _LEVELS:  # a typo in ATTNQ_LOG_LEVEL must not silently give another level
        print(f"attnq: warning: ATTNQ_LOG_LEVEL={name.lower()!r} is not one of "
              f"{', '.join(x.lower() for x in _LEVELS)}; logging at warning", file=sys.stderr)
        name = "WARNING"
    target = path or os.environ.get("ATTNQ_LOG_FILE")
    stream = sys.stderr
    if target:
        try:
            stream = open(target, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            print(f"attnq: warning: cannot open log file {target} ({exc.strerror or exc}); logging to stderr",
                  file=sys.stderr)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # log.exception(...) / exc_info=True: the traceback as text under "exception" (without this
            # processor the JSON says only "exc_info": true)
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, name, logging.WARNING)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A bound structlog logger; configures logging on first use."""
    configure_logging()
    return structlog.get_logger(name)
