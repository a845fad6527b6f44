"""The Metergraph app: server-rendered pages that app links open."""
