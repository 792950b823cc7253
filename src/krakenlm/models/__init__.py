"""Model configurations and presets (torch-free). The PyTorch modules live in
`krakenlm.models.transformer` so that the simulator can use configs without importing torch."""

from .config import ConfigError, ModelConfig, kraken_engine_for_params, kraken_width_for_params
from .presets import PRESETS, get_preset, preset_names

__all__ = ["ConfigError", "ModelConfig", "PRESETS", "get_preset", "kraken_engine_for_params",
           "kraken_width_for_params",
           "preset_names"]
