"""Files copied into an exported model directory for `trust_remote_code=True` loading.

They are data for krakenlm (never imported by it) and must stay self-contained: torch and
transformers only.
"""
