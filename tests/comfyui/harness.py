"""Runs the real ComfyUI server (CPU) in a subprocess and talks to it over HTTP and websocket.

The ComfyUI tree (made by scripts/comfyui.sh) is never written to: every runtime directory
(custom_nodes, input, output, temp, user, models, the sqlite database) goes to a separate base
directory through ComfyUI's own ``--base-directory`` and ``--database-url`` flags.

    base = make_base_dir(tmp_path, custom_nodes={"my_pack": PACK_DIR})
    with ComfyUI(comfyui_dir, base, env={"SOME_VAR": "1"}) as ui:
        assert "KSampler" in ui.object_info()
        entry = ui.wait(ui.queue(prompt), timeout=60)
        ui.messages(prompt_id)       # websocket events (progress, executing, custom events)

Only the stdlib, plus aiohttp for the optional websocket listener (ComfyUI itself needs aiohttp,
so it is in the venv).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMFYUI_VERSION = "0.30.0"
DEFAULT_COMFYUI_DIR = ROOT / ".cache" / "comfyui" / COMFYUI_VERSION / "ComfyUI"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

# Runtime directories made in the base dir. ComfyUI 0.30.0 crashes at startup without
# custom_nodes/ (execute_prestartup_script lists it); isolated_nodes/ is ours.
BASE_SUBDIRS = ("custom_nodes", "isolated_nodes", "input", "output", "temp", "user", "models")


class ComfyUIError(RuntimeError):
    """The server failed to start, died, or answered with an unexpected HTTP error."""


class PromptRejected(ComfyUIError):
    """POST /prompt answered 400: the prompt failed validation.

    ``response`` is ComfyUI's JSON: ``{"error": {...}, "node_errors": {node_id: {...}}}``.
    """

    def __init__(self, response: Any, status: int = 400):
        self.response = response
        self.status = status
        body = response if isinstance(response, dict) else {}
        self.error = body.get("error")
        self.node_errors = body.get("node_errors", {})
        super().__init__(f"prompt rejected (HTTP {status}): {json.dumps(response)[:2000]}")


class ExecutionFailed(ComfyUIError):
    """A prompt finished with status "error" (raised by ComfyUI.run with check=True)."""

    def __init__(self, entry: dict, log_tail: str = ""):
        self.entry = entry
        self.error = execution_error(entry)
        msg = "prompt failed"
        if self.error:
            msg += (
                f": {self.error.get('exception_type')}: {self.error.get('exception_message')}"
                f" (node {self.error.get('node_id')} {self.error.get('node_type')})"
            )
        if log_tail:
            msg += f"\n--- ComfyUI log tail ---\n{log_tail}"
        super().__init__(msg)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_base_dir(
    tmp_path: Path,
    custom_nodes: Mapping[str, Path] | None = None,
    isolated: Mapping[str, Path] | None = None,
    *,
    copy: bool = False,
    name: str = "comfy_base",
) -> Path:
    """Creates ``tmp_path/name`` with the runtime dirs ComfyUI needs.

    ``custom_nodes`` and ``isolated`` map a pack name (the entry name under custom_nodes/ or
    isolated_nodes/) to the pack's directory (or single .py file); each is symlinked, or copied
    with ``copy=True`` (use that when the test writes into the pack).
    """
    base = Path(tmp_path) / name
    for sub in BASE_SUBDIRS:
        (base / sub).mkdir(parents=True, exist_ok=True)
    for sub, packs in (("custom_nodes", custom_nodes), ("isolated_nodes", isolated)):
        for pack_name, src in (packs or {}).items():
            src = Path(src).resolve()
            if not src.exists():
                raise FileNotFoundError(f"pack {pack_name!r}: {src} does not exist")
            dst = base / sub / pack_name
            if copy and src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            elif copy:
                shutil.copy2(src, dst)
            else:
                dst.symlink_to(src, target_is_directory=src.is_dir())
    return base


def execution_error(entry: dict) -> dict | None:
    """The ``execution_error`` message data of a history entry, or None."""
    for msg in (entry.get("status") or {}).get("messages") or []:
        if isinstance(msg, list | tuple) and len(msg) == 2 and msg[0] == "execution_error":
            return msg[1]
    return None


def output_files(entry: dict) -> list[dict]:
    """Every file a history entry's outputs name (images, audio, video, ...), as ComfyUI gives
    them: ``{"filename", "subfolder", "type"}``."""
    files = []
    for node_out in (entry.get("outputs") or {}).values():
        for items in node_out.values():
            if isinstance(items, list):
                files.extend(i for i in items if isinstance(i, dict) and "filename" in i)
    return files


def tree_changes(comfyui_dir: Path) -> list[str]:
    """Files of a tree made by scripts/comfyui.sh that differ from its manifest (modified,
    missing, or added; ``__pycache__`` is ignored). Empty means the host ComfyUI is unpatched.
    Raises FileNotFoundError if the tree has no manifest (not made by scripts/comfyui.sh)."""
    comfyui_dir = Path(comfyui_dir)
    manifest = comfyui_dir.with_name(comfyui_dir.name + ".sha256")
    expected = {}
    for line in manifest.read_text().splitlines():
        digest, rel = line.split(None, 1)
        expected[os.path.normpath(rel.lstrip("*"))] = digest
    changes = []
    seen = set()
    for dirpath, dirnames, filenames in os.walk(comfyui_dir):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in filenames:
            rel = os.path.relpath(os.path.join(dirpath, fn), comfyui_dir)
            seen.add(rel)
            if rel not in expected:
                changes.append(f"added: {rel}")
                continue
            with open(os.path.join(dirpath, fn), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != expected[rel]:
                    changes.append(f"modified: {rel}")
    changes.extend(f"missing: {rel}" for rel in sorted(set(expected) - seen))
    return changes


class ComfyUI:
    """One real ComfyUI server process (``main.py --cpu``), started in its own session.

    ``env`` is applied over ``os.environ`` (a value of None removes that variable).
    ``extra_args`` go after the harness's own arguments (argparse: a later flag wins).
    """

    def __init__(
        self,
        comfyui_dir: Path | str,
        base_dir: Path | str,
        *,
        extra_args: Iterable[str] = (),
        env: Mapping[str, str | None] | None = None,
        python: Path | str | None = None,
        port: int | None = None,
        startup_timeout: float = 180.0,
        websocket: bool = True,
        start: bool = True,
    ):
        self.comfyui_dir = Path(comfyui_dir).resolve()
        self.base_dir = Path(base_dir).resolve()
        self.extra_args = list(extra_args)
        self.env_overrides = dict(env or {})
        self.python = str(python or (VENV_PYTHON if VENV_PYTHON.exists() else sys.executable))
        self._fixed_port = port
        self.port: int | None = None
        self.startup_timeout = startup_timeout
        self.client_id = uuid.uuid4().hex
        self.log_path = self.base_dir / "comfyui.log"
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None
        self._want_ws = websocket
        self._ws_thread: threading.Thread | None = None
        self._ws_loop = None
        self._ws_stop = None
        self._ws_ready = threading.Event()
        self._ws_error: BaseException | None = None
        self._messages: list[dict] = []
        self._msg_cond = threading.Condition()
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def output_dir(self) -> Path:
        return self.base_dir / "output"

    def command(self) -> list[str]:
        db = self.base_dir / "user" / "comfyui.db"
        # ComfyUI's default database lives inside its own tree (<tree>/user/comfyui.db): point
        # it into the base dir so the tree is never written to.
        args = [
            self.python,
            str(self.comfyui_dir / "main.py"),
            "--cpu",
            "--listen",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--base-directory",
            str(self.base_dir),
            "--database-url",
            f"sqlite:///{db}",
            "--disable-auto-launch",
        ]
        return args + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        for key, value in self.env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env

    def start(self) -> ComfyUI:
        if not (self.comfyui_dir / "main.py").is_file():
            raise ComfyUIError(f"{self.comfyui_dir} is not a ComfyUI tree (no main.py)")
        for sub in BASE_SUBDIRS:
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self._start_with_retries()
        except BaseException:
            # Interrupted while waiting (a test's timeout, Ctrl-C): no server is left behind.
            self._reap()
            raise
        if self._want_ws:
            self._start_ws()
        return self

    def _start_with_retries(self) -> None:
        # A free port can be taken between probing and binding: retry on EADDRINUSE.
        for attempt in range(3):
            self.port = self._fixed_port or free_port()
            log_start = len(self.log_text())
            try:
                self._start_once()
                return
            except ComfyUIError:
                if (
                    self._fixed_port is None
                    and attempt < 2
                    and "address already in use" in self.log_text()[log_start:].lower()
                ):
                    continue
                raise

    def _start_once(self) -> None:
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.base_dir,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = t0 + self.startup_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._reap()
                raise ComfyUIError(
                    f"ComfyUI exited with status {rc} during startup\n"
                    f"--- {self.log_path} (tail) ---\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/system_stats", timeout=2) as r:
                    if r.status == 200:
                        json.load(r)
                        break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ComfyUIError(
                    f"ComfyUI did not answer /system_stats within {self.startup_timeout:.0f}s\n"
                    f"--- {self.log_path} (tail) ---\n{self.log_tail()}"
                )
            time.sleep(0.2)
        self.startup_seconds = time.monotonic() - t0

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGINT to the server's process group, then SIGKILL after ``grace`` seconds.
        Returns the server's exit status (None if it was never started)."""
        self._stop_ws()
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        self._reap()
        return proc.returncode

    def _reap(self) -> None:
        """Kills whatever is left in the server's session (its children too) and waits."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> ComfyUI:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- log ---------------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- HTTP --------------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 30.0
    ) -> tuple[int, bytes, str]:
        """(status, body bytes, content type). HTTP errors are returned, not raised."""
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")
        except OSError as e:
            raise ComfyUIError(
                f"{method} {path} failed: {e}\n"
                f"(server {'alive' if self.alive else 'DEAD'}; log tail)\n{self.log_tail()}"
            ) from e

    def get(self, path: str, *, raw: bool = False, timeout: float = 30.0) -> Any:
        """GET ``path``; the decoded JSON (or the bytes with ``raw=True``). Raises on non-2xx."""
        status, body, ctype = self.request("GET", path, timeout=timeout)
        if not 200 <= status < 300:
            raise ComfyUIError(f"GET {path}: HTTP {status}: {body[:2000]!r}")
        if raw or "json" not in ctype:
            return body
        return json.loads(body)

    def post(self, path: str, body: Any, *, timeout: float = 30.0) -> Any:
        status, data, ctype = self.request("POST", path, body, timeout=timeout)
        if not 200 <= status < 300:
            raise ComfyUIError(f"POST {path}: HTTP {status}: {data[:2000]!r}")
        return json.loads(data) if "json" in ctype and data else data

    def object_info(self, node_class: str | None = None) -> dict:
        if node_class:
            return self.get(f"/object_info/{urllib.parse.quote(node_class)}")
        return self.get("/object_info", timeout=120)

    def queue(self, prompt: dict, *, extra_data: dict | None = None) -> str:
        """POST /prompt with this harness's client_id; returns the prompt_id.
        Raises PromptRejected (carrying ComfyUI's JSON, with node_errors) on HTTP 400."""
        payload: dict[str, Any] = {"prompt": prompt, "client_id": self.client_id}
        if extra_data:
            payload["extra_data"] = extra_data
        status, body, _ = self.request("POST", "/prompt", payload)
        try:
            data = json.loads(body)
        except ValueError:
            data = body.decode(errors="replace")
        if status == 400:
            raise PromptRejected(data, status)
        if status != 200 or not isinstance(data, dict) or "prompt_id" not in data:
            raise ComfyUIError(f"POST /prompt: HTTP {status}: {data!r}")
        return data["prompt_id"]

    def history(self, prompt_id: str) -> dict | None:
        """The history entry of ``prompt_id``, or None while it has none."""
        return self.get(f"/history/{prompt_id}").get(prompt_id)

    def wait(self, prompt_id: str, timeout: float = 120.0, *, poll: float = 0.2) -> dict:
        """Polls GET /history/<id> until the prompt completed or failed; returns the entry.
        Check ``entry["status"]["status_str"]`` ("success" / "error") or use execution_error()."""
        deadline = time.monotonic() + timeout
        while True:
            entry = self.history(prompt_id)
            if entry is not None:
                status = entry.get("status") or {}
                if status.get("completed") or status.get("status_str") == "error":
                    return entry
            if not self.alive:
                raise ComfyUIError(
                    f"ComfyUI died while prompt {prompt_id} ran (status {self.proc.returncode})\n"
                    f"--- log tail ---\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ComfyUIError(
                    f"prompt {prompt_id} not finished after {timeout:.0f}s "
                    f"(history: {json.dumps(entry)[:1000] if entry else None})\n"
                    f"--- log tail ---\n{self.log_tail()}"
                )
            time.sleep(poll)

    def run(self, prompt: dict, timeout: float = 120.0, *, check: bool = True) -> dict:
        """queue() + wait(); with ``check`` raises ExecutionFailed if the prompt errored."""
        entry = self.wait(self.queue(prompt), timeout)
        if check and (entry.get("status") or {}).get("status_str") == "error":
            raise ExecutionFailed(entry, self.log_tail())
        return entry

    def output_paths(self, entry: dict) -> list[Path]:
        """Paths on disk of the files a history entry's outputs name."""
        roots = {"output": "output", "temp": "temp", "input": "input"}
        return [
            self.base_dir
            / roots.get(f.get("type", "output"), "output")
            / f.get("subfolder", "")
            / f["filename"]
            for f in output_files(entry)
        ]

    # -- websocket ---------------------------------------------------------------------------

    def messages(self, prompt_id: str | None = None, type: str | None = None) -> list[dict]:
        """Websocket messages received so far, oldest first: ``{"type", "data"}`` dicts as
        ComfyUI sends them (binary frames, i.e. previews, as ``{"type": "binary", "event": int,
        "data": bytes}``). Filters: ``prompt_id`` (keeps only messages whose ``data["prompt_id"]``
        is that prompt; ``status`` and most custom events carry none), ``type``."""
        with self._msg_cond:
            msgs = list(self._messages)
        return [m for m in msgs if _matches(m, prompt_id, type)]

    def wait_message(
        self,
        predicate: Callable[[dict], bool] | None = None,
        *,
        type: str | None = None,
        prompt_id: str | None = None,
        timeout: float = 60.0,
    ) -> dict:
        """Waits for (and returns) the first websocket message matching the filters."""
        deadline = time.monotonic() + timeout
        with self._msg_cond:
            while True:
                for m in self._messages:
                    if _matches(m, prompt_id, type) and (predicate is None or predicate(m)):
                        return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ComfyUIError(
                        f"no websocket message type={type} prompt_id={prompt_id} "
                        f"within {timeout:.0f}s; got types "
                        f"{[m.get('type') for m in self._messages][-50:]}"
                    )
                self._msg_cond.wait(min(left, 0.5))

    def _start_ws(self) -> None:
        self._ws_ready.clear()
        self._ws_thread = threading.Thread(target=self._ws_main, name="comfyui-ws", daemon=True)
        self._ws_thread.start()
        if not self._ws_ready.wait(30) or self._ws_error is not None:
            err = self._ws_error
            self.stop()
            raise ComfyUIError(f"websocket connection to {self.url}/ws failed: {err!r}")

    def _ws_main(self) -> None:
        import asyncio

        try:
            loop = asyncio.new_event_loop()
        except BaseException as e:  # pragma: no cover
            self._ws_error = e
            self._ws_ready.set()
            return
        self._ws_loop = loop
        try:
            loop.run_until_complete(self._ws_run())
        except BaseException as e:
            if not self._ws_ready.is_set():
                self._ws_error = e
        finally:
            self._ws_ready.set()
            loop.close()

    async def _ws_run(self) -> None:
        import asyncio

        import aiohttp

        self._ws_stop = asyncio.Event()
        url = f"ws://127.0.0.1:{self.port}/ws?clientId={self.client_id}"
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            self._ws_ready.set()
            stop_task = asyncio.ensure_future(self._ws_stop.wait())
            while True:
                recv = asyncio.ensure_future(ws.receive())
                done, _ = await asyncio.wait({recv, stop_task}, return_when="FIRST_COMPLETED")
                if stop_task in done:
                    recv.cancel()
                    break
                msg = recv.result()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        item = json.loads(msg.data)
                    except ValueError:
                        item = {"type": "invalid", "data": msg.data}
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    event = int.from_bytes(msg.data[:4], "big") if len(msg.data) >= 4 else -1
                    item = {"type": "binary", "event": event, "data": msg.data[4:]}
                else:  # CLOSE, CLOSED, ERROR: the server went away
                    break
                item["received_at"] = time.monotonic()
                with self._msg_cond:
                    self._messages.append(item)
                    self._msg_cond.notify_all()
            stop_task.cancel()

    def _stop_ws(self) -> None:
        thread, loop, stop = self._ws_thread, self._ws_loop, self._ws_stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=5)
        self._ws_thread = None


def _matches(msg: dict, prompt_id: str | None, type: str | None) -> bool:
    if type is not None and msg.get("type") != type:
        return False
    if prompt_id is not None:
        data = msg.get("data")
        if not isinstance(data, dict) or data.get("prompt_id") != prompt_id:
            return False
    return True
