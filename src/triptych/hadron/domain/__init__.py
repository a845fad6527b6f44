"""Hadron domain rules that need no I/O: the URN, loc and slug grammar."""
