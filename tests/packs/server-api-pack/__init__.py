"""Test pack: what real packs use of ComfyUI's ``server`` module in a node, loaded natively
and isolated so the two can be compared. Its node's name starts with the pack's folder name,
so two copies can share a server.

At import: ``from server import PromptServer, BinaryEventTypes`` and a module-level
``prompt_queue = PromptServer.instance.prompt_queue`` (as a video pack does). In the node: the
queue (running item, remaining count), ``last_node_id``, ``client_id``, ``last_prompt_id``,
``send_sync`` of a JSON event and of an unencoded preview image, ``send_progress_text``.
An on-prompt handler, as seed and wildcard packs register one: it stamps its node's input
before ComfyUI validates the prompt.
"""

import json
import os

import folder_paths  # noqa: F401  (a ComfyUI pack: shares e2e-nodes' environment)
import server
from PIL import Image
from server import BinaryEventTypes, PromptServer

NAME = os.path.basename(os.path.dirname(os.path.abspath(__file__)))
prompt_queue = PromptServer.instance.prompt_queue
assert server.BinaryEventTypes.TEXT == 3


class ServerProbe:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"tag": ("STRING", {"default": "t"})},
            "optional": {"stamp": ("STRING", {"default": ""})},
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    RETURN_TYPES = ()
    FUNCTION = "probe"
    OUTPUT_NODE = True
    CATEGORY = "airlock-test"

    def probe(self, tag, stamp="", unique_id=None):
        ps = PromptServer.instance
        running, queued = prompt_queue.get_current_queue()
        current = list(prompt_queue.currently_running.values())
        report = {
            "tag": tag,
            "stamp": stamp,
            "unique_id": unique_id,
            "last_node_id": ps.last_node_id,
            "client_id": ps.client_id,
            "last_prompt_id": ps.last_prompt_id,
            "running_ids": [item[1] for item in running],
            "running_len": [len(item) for item in running],
            "sensitive": [item[5] for item in running],
            "current_ids": [item[1] for item in current],
            "queued": len(queued),
            "remaining": prompt_queue.get_tasks_remaining(),
            "events": [BinaryEventTypes.UNENCODED_PREVIEW_IMAGE, BinaryEventTypes.TEXT],
        }
        # As a video pack requeues: take a number from the host's counter and bump it.
        number = ps.number
        ps.number += 1
        report["number_bumped"] = ps.number == number + 1
        ps.send_sync(NAME + ".event", {"tag": tag, "node": unique_id}, ps.client_id)
        image = Image.new("RGB", (8, 8), (255, 0, 0))
        ps.send_sync(BinaryEventTypes.UNENCODED_PREVIEW_IMAGE, ("PNG", image, None), ps.client_id)
        ps.send_progress_text(f"{NAME} says hi", unique_id, ps.client_id)
        return {"ui": {"text": [json.dumps(report)]}}


def stamp_probes(json_data):
    """What upstream calls with each POST /prompt body: stamps this pack's probes (the body's
    API key, if this handler can see one, too)."""
    key = (json_data.get("extra_data") or {}).get("api_key_comfy_org")
    for node in json_data.get("prompt", {}).values():
        if node.get("class_type") == NAME + "Probe":
            node["inputs"]["stamp"] = f"{NAME} saw key {key}"
    return json_data


PromptServer.instance.add_on_prompt_handler(stamp_probes)

NODE_CLASS_MAPPINGS = {NAME + "Probe": ServerProbe}
