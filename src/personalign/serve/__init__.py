"""`personalign serve`: the memory engine as an OpenAI-compatible personalization gateway.

`create_app(GatewayConfig(...))` builds the ASGI app; `GatewayServer` runs it with uvicorn in a
thread (tests, benchmarks); the CLI runs it in the foreground. See docs/serve.md.
"""

from personalign.serve.app import GatewayConfig, create_app
from personalign.serve.keys import ApiKey, KeyRing, new_key
from personalign.serve.server import GatewayServer

__all__ = ["ApiKey", "GatewayConfig", "GatewayServer", "KeyRing", "create_app", "new_key"]
