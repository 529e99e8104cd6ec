"""Scapy-built captures of stream behaviours and payload keywords (see captures.py)."""

CAPTURES = {}
