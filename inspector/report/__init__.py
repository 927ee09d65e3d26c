"""Verification report model and its JSON / HTML / PDF renderers."""
