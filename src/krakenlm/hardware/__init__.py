"""Hardware descriptions: a validated schema and YAML presets (every number with its source).

    from krakenlm.hardware import load_system, preset_system_names
    system = load_system("a100-80gb-x4")       # or a path to your own YAML file
    system.device.memory.bandwidth_bytes_per_s
"""

from .loader import load_system, preset_system_names, replace_path
from .schema import DTYPE_BYTES, Device, HardwareError, Interconnect, System, system_from_dict

__all__ = ["DTYPE_BYTES", "Device", "HardwareError", "Interconnect", "System", "load_system",
           "preset_system_names", "replace_path", "system_from_dict"]
