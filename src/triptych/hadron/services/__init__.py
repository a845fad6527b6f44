"""Hadron services: every rule of the surface, called by the MCP tools and the admin CLI."""
