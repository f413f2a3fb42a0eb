"""comfy-env's ``comfy_worker`` helper for code running in a pack's worker, answered by
comfy-airlock (found only where comfy-env is not installed; see ``comfy_airlock.compat``)."""


def register_model(model, name=None, device=None, **_ignored):
    """Makes the pack's ``torch.nn.Module`` visible to ComfyUI's memory manager in the host
    (:func:`comfy_airlock.register_model`); outside a worker it does nothing."""
    import comfy_airlock

    return comfy_airlock.register_model(model, name=name, device=device)


def call_parent(*args, **kwargs):
    """comfy-env's host RPC has no comfy-airlock counterpart."""
    raise NotImplementedError(
        "comfy_worker.call_parent is comfy-env's own RPC to its host; comfy-airlock has no "
        "equivalent (a pack's routes and progress reach ComfyUI through PromptServer)"
    )
