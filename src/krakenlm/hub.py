"""Whether the Hugging Face hub can be reached, decided once and fast.

`datasets` and `huggingface_hub` retry an unreachable hub for half a minute before failing with
a page of warnings; without a network, krakenlm puts them in offline mode first, so a hub corpus
or task loads from the local cache or fails at once with what to do.
"""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse

HUB_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_is_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in HUB_OFFLINE_VARIABLES)


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """A TCP connection to the hub (HF_ENDPOINT if set) opens within `timeout_s`."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def go_offline_unless_hub_reachable() -> bool:
    """Put `datasets` and `huggingface_hub` in offline mode when the hub cannot be reached, so
    a hub task fails at once (or loads from the local cache) instead of retrying for half a
    minute. Must run before either library is imported: both read the variables on import.
    Returns whether the hub is treated as offline."""
    if hub_is_offline():
        _tell_imported_libraries()
        return True
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False  # through a proxy a direct connection says nothing; leave it to the hub
    if hub_reachable():
        return False
    for variable in HUB_OFFLINE_VARIABLES:
        os.environ[variable] = "1"
    _tell_imported_libraries()
    return True


def _tell_imported_libraries() -> None:
    """Offline mode for `huggingface_hub` and `datasets` already imported in this process (a
    notebook, a program that imported them first): they read the variables once, on import,
    and would otherwise retry the hub for 20-30 s. Their flags are read at each call
    (`huggingface_hub.constants.HF_HUB_OFFLINE`, `datasets.config.HF_HUB_OFFLINE`)."""
    hub_constants = sys.modules.get("huggingface_hub.constants")
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = datasets_config.HF_DATASETS_OFFLINE = True
