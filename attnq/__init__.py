"""The ``attnq`` command line: a second edge over harness/ and questions/ (the MCP server is the first)."""
