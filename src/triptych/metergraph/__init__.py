"""Metergraph: LLM usage and cost telemetry surface."""
