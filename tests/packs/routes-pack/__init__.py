"""Test pack: HTTP routes registered at import in every way real packs do, so the same code
can be loaded natively (custom_nodes/) and isolated (isolated_nodes/) and the answers
compared. Every path starts with the pack's folder name, so two copies can share a server.

- on the app: ``app.router.add_get`` / ``add_post`` / ``add_route`` / ``add_static``,
  ``app.add_routes([web.get(...)])`` and a module-level ``ROUTES`` table added with
  ``app.add_routes``;
- on upstream's table: ``@PromptServer.instance.routes.get/post/put/delete``;
- a node that waits, while it runs, for the page to POST to the pack's route (a chooser);
- a monitor thread that sends the page a message every second, calls or not (Crystools).
"""

import asyncio
import hashlib
import json
import os
import threading
import time
import typing

import folder_paths
from aiohttp import web
from server import PromptServer

HERE = os.path.dirname(os.path.abspath(__file__))
P = "/" + os.path.basename(HERE)
app = PromptServer.instance.app
routes = PromptServer.instance.routes


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- on the app ------------------------------------------------------------------------------


async def app_item(request):
    return web.json_response(
        {
            "item": request.match_info["item"],
            "rest": request.match_info.get("rest"),
            "query": [[k, v] for k, v in request.query.items()],
            "method": request.method,
        }
    )


async def app_post(request):
    data = await request.json()
    return web.json_response({"got": data, "ctype": request.content_type}, status=201)


async def any_method(request):
    return web.Response(text=f"{request.method} {request.path}")


app.router.add_get(P + "/app/item/{item:\\d+}", app_item)
app.router.add_get(P + "/app/item/{item:\\d+}/{rest:.*}", app_item)
app.router.add_post(P + "/app/post", app_post)
app.router.add_route("*", P + "/app/any", any_method)
app.router.add_static(P + "/static", os.path.join(HERE, "files"))


async def listed(request):
    return web.Response(text="listed", headers={"X-Pack": "routes-pack"})


app.add_routes([web.get(P + "/app/listed", listed)])

ROUTES = web.RouteTableDef()


@ROUTES.get(P + "/module-routes")
async def module_routes(request):
    return web.json_response({"module": True})


app.add_routes(ROUTES)

# --- on upstream's route table -----------------------------------------------------------


@routes.get(P + "/echo")
async def echo(request):
    return web.json_response(
        {
            "query": [[k, v] for k, v in request.query.items()],
            "header": request.headers.get("X-Custom"),
            "host": request.host,
            "path": request.path,
            "cookie": request.cookies.get("c"),
        }
    )


@routes.post(P + "/json")
async def post_json(request):
    data = await request.json()
    return web.json_response({"echo": data, "len": request.content_length})


@routes.post(P + "/form")
async def post_form(request):
    form = await request.post()
    out = {}
    for key in form:
        value = form[key]
        if isinstance(value, str):
            out[key] = value
        else:  # an uploaded file
            out[key] = {
                "filename": value.filename,
                "type": value.content_type,
                "sha": _sha(value.file.read()),
            }
    return web.json_response(out)


@routes.post(P + "/multipart")
async def post_multipart(request):
    reader = await request.multipart()
    parts = []
    while (part := await reader.next()) is not None:
        data = await part.read()
        parts.append({"name": part.name, "filename": part.filename, "sha": _sha(bytes(data))})
    return web.json_response(parts)


@routes.post(P + "/binary")
async def post_binary(request):
    data = await request.read()
    # The bytes back reversed, as a download.
    return web.Response(
        body=data[::-1],
        content_type="application/octet-stream",
        headers={"X-Sha": _sha(data), "Content-Disposition": 'attachment; filename="r.bin"'},
    )


@routes.get(P + "/big")
async def big(request):
    n = int(request.query.get("n", "3000000"))
    return web.Response(body=bytes(i % 251 for i in range(n)), content_type="image/png")


@routes.get(P + "/file")
async def file(request):
    return web.FileResponse(os.path.join(HERE, "files", "hello.txt"))


@routes.get(P + "/text")
async def text(request):
    resp = web.Response(text="teapot", status=418, reason="I'm a teapot")
    resp.set_cookie("flavour", "earl-grey")
    resp.headers["Cache-Control"] = "no-store"
    return resp


@routes.get(P + "/stream")
async def stream(request):
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for i in range(3):
        await resp.write(f"chunk{i};".encode())
    await resp.write_eof()
    return resp


@routes.get(P + "/missing")
async def missing(request):
    raise web.HTTPNotFound(text="no such thing")


@routes.put(P + "/put/{key}")
async def put(request):
    return web.json_response({"key": request.match_info["key"], "body": await request.text()})


@routes.delete(P + "/put/{key}")
async def delete(request):
    return web.Response(status=204)


@routes.get(P + "/where")
async def where(request):
    return web.json_response({"pid": os.getpid(), "output": folder_paths.get_output_directory()})


@routes.get(P + "/user")
async def user(request):
    um = PromptServer.instance.user_manager
    return web.json_response(
        {
            "id": um.get_request_user_id(request),
            "file": um.get_request_user_filepath(request, "x.json", create_dir=False),
        }
    )


@routes.get(P + "/notify")
async def notify(request):
    PromptServer.instance.send_sync("routes-pack.notify", {"from": P})
    return web.json_response({"sent": True})


@routes.get(P + "/slow")
async def slow(request):
    await asyncio.sleep(float(request.query.get("s", "120")))
    return web.Response(text="late")


@routes.get(P + "/crash")
async def crash(request):
    os._exit(3)  # the worker dies under the request (never called natively)


# --- a node that waits, while it runs, for a request to its own pack ----------------------
# The shape of the image-chooser packs (cg-image-picker's Preview Chooser, Easy-Use's): the node
# shows the choices in the browser, then loops until the page POSTs the user's pick to the
# pack's route, which hands it over in a class attribute.


class Picks:
    picks: typing.ClassVar[dict] = {}
    cancelled = False


@routes.post(P + "/pick")
async def pick(request):
    form = await request.post()
    if form.get("message") == "__cancel__":
        Picks.cancelled = True
    else:
        Picks.picks[str(form.get("id"))] = form.get("message")
    # The queue as the handler reads it while the node waits (a question to the host, asked
    # from the route's thread while the node's call runs).
    running, pending = PromptServer.instance.prompt_queue.get_current_queue()
    return web.json_response({"running": len(running), "pending": len(pending)})


class ChooserNode:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"choices": ("STRING", {"default": "red,green,blue"})},
            "hidden": {"id": "UNIQUE_ID"},
        }

    RETURN_TYPES = ("STRING",)
    FUNCTION = "choose"
    OUTPUT_NODE = True
    CATEGORY = "airlock-test"

    def choose(self, choices, id):
        import comfy.model_management

        options = choices.split(",")
        PromptServer.instance.send_sync(P[1:] + ".choose", {"id": id, "choices": options})
        while str(id) not in Picks.picks:
            if Picks.cancelled:
                Picks.cancelled = False
                raise RuntimeError("the pick was cancelled")
            comfy.model_management.throw_exception_if_processing_interrupted()
            time.sleep(0.05)
        chosen = options[int(Picks.picks.pop(str(id)))]
        return {"ui": {"text": [chosen]}, "result": (chosen,)}


# --- a monitor: UI messages from a thread of the pack's own, while no node runs ------------
# The shape of ComfyUI-Crystools' resource monitor: a thread started at import runs an event
# loop that sends the page a status every second, whether a prompt runs or not.


async def _monitor_loop():
    beat = 0
    while True:
        beat += 1
        PromptServer.instance.send_sync(P[1:] + ".monitor", {"beat": beat, "pid": os.getpid()})
        await asyncio.sleep(1.0)


threading.Thread(
    target=lambda: asyncio.run(_monitor_loop()), name="routes-pack-monitor", daemon=True
).start()


class RoutesPackNode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "x"})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"
    CATEGORY = "airlock-test"

    def run(self, text):
        return (json.dumps({"text": text}),)


NODE_CLASS_MAPPINGS = {
    os.path.basename(HERE) + "Node": RoutesPackNode,
    os.path.basename(HERE) + "Chooser": ChooserNode,
}
