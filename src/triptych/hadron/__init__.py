"""Hadron: graph memory and team coordination surface."""
