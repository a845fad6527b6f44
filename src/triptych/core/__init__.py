"""Shared by every surface; imports none of them."""
