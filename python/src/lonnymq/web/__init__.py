"""``lonnymq web``: the operations dashboard and ``/metrics`` (extra ``lonnymq[web]``).

``create_app(dsn_or_pool, ...)`` returns a Starlette app to serve with uvicorn or to mount
in your own ASGI app. See docs/operations.md.
"""

from .app import create_app

__all__ = ["create_app"]
