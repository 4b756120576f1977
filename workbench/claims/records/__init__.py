"""Claim records (YAML), one file per claim; read by :func:`workbench.claims.ledger.load_records`."""
