"""Drift canary for V3 proxies (ADR 0005 decision 13): a V3 proxy has no schema, so every class
property upstream's V3 base computes from one (``RETURN_TYPES``, ``NOT_IDEMPOTENT``...) must be
a plain attribute of the proxy, or ComfyUI reading it would call ``define_schema`` and fail.
It reads the REAL upstream base class (the tree under test), so a ComfyUI version that adds
one fails here, not in a user's prompt. Run in a child interpreter: importing ComfyUI's
modules into the test process would change what other tests see."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from comfy_api.internal import classproperty
    from comfy_api.latest import _io
    from comfy_airlock.host.pack import IsolatedPack
    from comfy_airlock.host.proxy_v3 import build_v3_proxy

    info = {
        "input": {"required": {"x": ("INT", {"default": 1})}, "hidden": {"unique_id": ("UNIQUE_ID",)}},
        "output": ["INT"], "output_name": ["INT"], "output_is_list": [False],
        "output_tooltips": [None], "is_input_list": False, "output_node": False,
        "category": "c", "description": "", "deprecated": False, "experimental": False,
        "dev_only": False, "api_node": False, "name": "N", "display_name": None,
    }
    meta = {"kind": "v3", "info": info, "INPUT_TYPES": info["input"], "methods": {}}
    pack = IsolatedPack(name="p", dir="/x/p", python=sys.executable, env_dir="/x", env_key="k")
    proxy = build_v3_proxy(pack, "N", meta)
    base = _io._ComfyNodeBaseInternal
    computed = sorted(n for n, v in vars(base).items() if isinstance(v, classproperty))
    missing = [n for n in computed if n not in vars(proxy)]
    proxy()  # ComfyUI instantiates a node: VALIDATE_CLASS must pass without a schema
    print(json.dumps({
        "computed": computed,
        "missing": missing,
        "v3": issubclass(proxy, _io._ComfyNodeInternal),
        "info": proxy.GET_NODE_INFO_V1()["python_module"],
        "relative": proxy.RELATIVE_PYTHON_MODULE,
    }))
    """
)


def test_a_v3_proxy_needs_no_schema(comfyui_dir):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(comfyui_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "RETURN_TYPES" in result["computed"], result  # the scan did find them
    assert result["missing"] == [], f"V3 class properties the proxy lacks: {result['missing']}"
    assert result["v3"] is True
    assert result["info"] == result["relative"] == "custom_nodes.p"
