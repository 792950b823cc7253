"""Whether the Hugging Face hub can be reached, decided once and fast.

`datasets` and `huggingface_hub` retry an unreachable hub for half a minute before failing with
a page of warnings; without a network, krakenlm puts them in offline mode first, so a hub corpus
or task loads from the local cache or fails at once with what to do.
"""

from __future__ import annotations

import os
import socket
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
        return True
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False  # through a proxy a direct connection says nothing; leave it to the hub
    if hub_reachable():
        return False
    for variable in HUB_OFFLINE_VARIABLES:
        os.environ[variable] = "1"
    return True
