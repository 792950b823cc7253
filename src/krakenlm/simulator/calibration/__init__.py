"""Fitting: constants from measurements (a query never imports this)."""
