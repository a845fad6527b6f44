"""Metronix: the knowledge base and agent memory surface."""
