"""The repeat-inference consistency check as it runs inside the jailed worker (torch here).

The torch-free client side is `inspector.sandbox.host.consistency_job`.
"""
