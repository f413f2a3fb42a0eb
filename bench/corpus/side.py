"""One server of a pair (native or isolated) as the corpus runner uses it: started on a base
directory, asked for what a pack put into it (nodes, routes, JS), and made to run one node.
Built on the tests' harness (``tests/comfyui/harness.py``), the same one the parity tests use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

from tests.comfyui.harness import ComfyUI, ComfyUIError, PromptRejected, execution_error

from .inputs import SOURCES

NODE_TIMEOUT = 60.0


class Side:
    def __init__(self, name: str, comfyui_dir: Path, base: Path, python: str, env: dict):
        self.name = name
        self.ui = ComfyUI(
            comfyui_dir,
            base,
            python=python,
            env=env,
            startup_timeout=1800,
            # The page's messages: each side's pack-sent types are compared (run.ui_messages).
            websocket=True,
            start=False,
        )
        self.start_error: str | None = None
        self.restarts = 0

    def start(self) -> bool:
        try:
            self.ui.start()
            return True
        except ComfyUIError as e:
            self.start_error = str(e)[-4000:]
            return False

    def stop(self) -> float:
        """SIGTERM (SIGINT exit is measured on its own, bench/corpus/starts.py: here it would
        cost each pack two upstream SIGINT exits), then the harness's stop for what is left."""
        t0 = time.monotonic()
        proc = self.ui.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        self.ui.stop(grace=10)
        return round(time.monotonic() - t0, 2)

    @property
    def startup_seconds(self) -> float | None:
        s = self.ui.startup_seconds
        return None if s is None else round(s, 2)

    def nodes(self, pack: str) -> dict[str, Any]:
        info = self.ui.object_info()
        module = f"custom_nodes.{pack}"
        return {k: v for k, v in info.items() if v.get("python_module") == module}

    def comfy_nodes(self) -> dict[str, Any]:
        """ComfyUI's own nodes (``nodes``, ``comfy_extras``...): none of a custom node's."""
        info = self.ui.object_info()
        return {
            k: v
            for k, v in info.items()
            if not str(v.get("python_module", "")).startswith("custom_nodes.")
        }

    def routes(self) -> list[dict[str, str]]:
        return self.ui.get("/corpus-probe/routes")

    def extensions(self, pack: str) -> list[str]:
        """The pack's ``.js`` files the frontend imports: ComfyUI's ``GET /extensions``, and on
        the isolated side comfy-airlock's ``GET /airlock/extensions``, which its frontend
        module imports in the same phase (ADR 0021)."""
        prefix = f"/extensions/{urllib.parse.quote(pack)}/"
        listed = list(self.ui.get("/extensions"))
        status, body, _ = self.ui.request("GET", "/airlock/extensions", timeout=30)
        if status == 200:
            listed.extend(json.loads(body))
        return sorted({e for e in listed if e.startswith(prefix)})

    def answer(self, method: str, path: str) -> dict[str, Any]:
        try:
            status, body, ctype = self.ui.request(method, path, timeout=30)
        except ComfyUIError as e:
            return {"status": None, "error": str(e).splitlines()[0][:300]}
        return {
            "status": status,
            "content_type": ctype.split(";")[0].strip(),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_len": len(body),
            "body_head": body[:160].decode("utf-8", "replace"),
        }

    def run_node(self, prompt: dict[str, Any], timeout: float = NODE_TIMEOUT) -> dict[str, Any]:
        """Queues ``prompt``; {status: success|error|rejected|timeout|server died, ...}."""
        t0 = time.monotonic()
        try:
            prompt_id = self.ui.queue(prompt)
        except PromptRejected as e:
            return {"status": "rejected", "error": _short(e.response)}
        except ComfyUIError as e:
            return {
                "status": "server died" if not self.ui.alive else "error",
                "error": str(e)[:500],
            }
        try:
            entry = self.ui.wait(prompt_id, timeout=timeout, poll=0.05)
        except ComfyUIError as e:
            if not self.ui.alive:
                return {"status": "server died", "error": str(e)[-800:]}
            self._interrupt()
            return {"status": "timeout", "seconds": round(time.monotonic() - t0, 2)}
        out: dict[str, Any] = {"seconds": round(time.monotonic() - t0, 3)}
        err = execution_error(entry)
        if err is not None:
            out["status"] = "error"
            out["error"] = f"{err.get('exception_type')}: {str(err.get('exception_message'))[:400]}"
            return out
        out["status"] = "success"
        out["outputs"] = entry.get("outputs") or {}
        out["files"] = {
            str(p.relative_to(self.ui.base_dir)): _sha(p) for p in self.ui.output_paths(entry)
        }
        return out

    def _interrupt(self) -> None:
        # Stop the node and clear the queue, so the next prompt starts at once.
        for path, body in (("/interrupt", {}), ("/queue", {"clear": True})):
            with contextlib.suppress(ComfyUIError):
                self.ui.request("POST", path, body, timeout=10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                queue = self.ui.get("/queue")
            except ComfyUIError:
                return
            if not queue.get("queue_running"):
                return
            time.sleep(0.5)

    def healthy(self) -> bool:
        """Whether the server still runs prompts (a node can kill ComfyUI's prompt worker: an
        exception outside the node's own call ends its thread, natively)."""
        if not self.ui.alive:
            return False
        probe = {
            "s": {"class_type": SOURCES["IMAGE"], "inputs": {}},
            "d": {"class_type": "CorpusDigest", "inputs": {"value": ["s", 0]}},
        }
        self.ui.request("POST", "/free", {"free_memory": True}, timeout=10)
        return self.run_node(probe, timeout=60).get("status") == "success"

    def restart(self) -> bool:
        self.restarts += 1
        self.stop()
        return self.start()

    def forget(self) -> None:
        """Empties ComfyUI's output cache, so the same prompt runs again (``/free`` takes
        effect after the next prompt: a source-only one is run for that)."""
        self.ui.request("POST", "/free", {"free_memory": True}, timeout=10)
        warm = {
            "s": {"class_type": SOURCES["IMAGE"], "inputs": {}},
            "d": {"class_type": "CorpusDigest", "inputs": {"value": ["s", 0]}},
        }
        self.run_node(warm, timeout=60)

    def log_text(self) -> str:
        return self.ui.log_text()


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _short(response: Any) -> str:
    import json

    return json.dumps(response)[:600]
