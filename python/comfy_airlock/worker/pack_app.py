"""The pack's ``PromptServer.instance.app`` in a worker: a real aiohttp application whose
router remembers the raw path of each resource, so that the scan (``routes.describe``) can tell
the host what to mount (ADR 0017)."""

from __future__ import annotations

from typing import Any

# The path each resource was added with, by the resource's id (aiohttp keeps only a pattern).
RAW_PATHS: dict[int, str] = {}


def make_app() -> Any:
    """The pack's ``PromptServer.instance.app``. Its router remembers the path each resource
    was added with (aiohttp keeps only a compiled pattern), so the host can mount the same."""
    from aiohttp import web

    app = web.Application(client_max_size=1 << 40)
    router = app.router
    add_resource = router.add_resource

    def recording(path: str, *, name: str | None = None) -> Any:
        resource = add_resource(path, name=name)
        RAW_PATHS[id(resource)] = path
        return resource

    router.add_resource = recording  # type: ignore[method-assign]
    return app
