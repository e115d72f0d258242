"""Parallax's trainer-side client: send a training run's metrics to a Parallax server without slowing training.

    from parallax.client import ParallaxClient
    with ParallaxClient("http://127.0.0.1:8050", project="agent-rl", run="grpo-7b-a", config={"k": 8}) as px:
        px.log({"entropy": 1.9, "actor/entropy": 1.9}, step=10)   # never blocks, never raises

Framework wrappers: ``ParallaxCallback`` (a TRL / transformers ``TrainerCallback``) and ``ParallaxLogger``
(verl / OpenRLHF style), importable without the frameworks. The distribution ``parallax-client`` depends on
httpx alone (the standard library otherwise) and imports nothing of the server.
"""

from parallax.client.client import HEARTBEAT_SECONDS, ParallaxClient
from parallax.client.integrations import ParallaxCallback, ParallaxLogger, unique_run_name
from parallax.client.spool import default_spool_dir

__all__ = [
    "HEARTBEAT_SECONDS",
    "ParallaxCallback",
    "ParallaxClient",
    "ParallaxLogger",
    "default_spool_dir",
    "unique_run_name",
]
__version__ = "0.1.0"
