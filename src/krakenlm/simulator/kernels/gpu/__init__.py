"""GPU kernel models, each following the source of the kernel it describes; their constants are fitted on measured kernel tables."""
