def disarm():
    """This worker's private mappings are no longer armed: private_pages walks them."""
    import types

    from comfy_airlock import _native, mappings

    mappings._native = types.SimpleNamespace(
        watch_private=lambda addr, nbytes: False, private_pages=_native.private_pages
    )
