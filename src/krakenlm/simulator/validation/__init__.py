"""Scoring: predictions against measurements they were not fitted on."""
