"""Software profiles (YAML): see krakenlm.simulator.software."""
