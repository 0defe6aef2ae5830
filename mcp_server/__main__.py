"""``python -m mcp_server``: start the attnq MCP server (stdio unless --http)."""

from mcp_server.cli import main

raise SystemExit(main())
