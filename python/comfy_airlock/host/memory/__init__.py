"""The host's memory bridge: worker models in ComfyUI's own ledger, admission of worker loads,
the reserve for a blind host, the idle policies and the RAM split. Layers, bottom to top (each
imports only those below it; ``.importlinter`` checks it):

- ``shapes``: the types passed around, and the worker handle every policy works through;
- ``reserve``: the blind term's rule and its publisher (``EXTRA_RESERVED_VRAM``, aimdo);
- ``standin``: one worker model as upstream's ledger sees it, over a handle and a callback;
- ``ledger``: the stand-ins, reconciled with workers' reports, in ``current_loaded_models``;
- ``evict``: the arbiter, its candidates, and the eviction of one candidate;
- ``ram`` and ``idle``: the RAM split, and idle workers' release on time and under pressure;
- ``heartbeat``: the two moments the ledger catches up (a call boundary, the timer);
- ``admission``: the answer to a worker's ``admit?``/``oom?``, and its holds;
- ``events``: the typed questions and reports a worker sends, routed to the above.

The device is read through ``comfy_airlock.card`` (one truth per process), shared with workers.
"""
