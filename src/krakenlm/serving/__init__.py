"""Serving simulator: request traces replayed through an engine's scheduler, with the time of
every engine step from the inference simulator (krakenlm.simulator). See docs/serving.md."""
