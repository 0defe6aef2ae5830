"""attnq's MCP server: tools, resources and a prompt over harness/ and questions/ (see docs/mcp.md).

``mcp_server.server.build_server(settings)`` builds the server; ``attnq serve`` or
``python -m mcp_server`` runs it over stdio (default) or streamable HTTP.
"""
