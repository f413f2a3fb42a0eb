"""What of ComfyUI's ``PromptServer.instance.prompt_queue`` crosses the process boundary, the
same on both sides: the worker's stand-in forwards these names and the host's server bridge
answers only them.

No method taking a function is here (a function cannot cross). ``get_flags`` is left out: it
resets the flags ComfyUI's prompt worker acts on.
"""

from __future__ import annotations

# Methods a worker may call on the host's PromptQueue.
QUEUE_METHODS = (
    "get_current_queue",
    "get_current_queue_volatile",
    "get_tasks_remaining",
    "get_history",
    "put",
    "set_flag",
    "interrupt_if_running",
    "wipe_queue",
    "wipe_history",
    "delete_history_item",
)
# Attributes a worker may read from it.
QUEUE_ATTRS = ("currently_running", "history", "queue")
