"""The stdio bridge's environment, named once for both commands that run it (``--help`` shows it)."""

BRIDGE_ENVIRONMENT = """\
  METERGRAPH_URL             the server's base URL, e.g. http://127.0.0.1:8000 (absolute http(s), no
                             query, fragment or credentials; required, else exit code 2)
  METERGRAPH_AGENT_TOKEN     an agent key (triptych metergraph key create) or a static MG_AGENT_TOKENS
                             entry; every read needs one, auth on or off
"""
