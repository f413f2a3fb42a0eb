"""Which web folders of an isolated pack the host serves (ADR 0021), read alone: the real
server path is tests/comfyui/test_pack_web.py."""

from __future__ import annotations

import logging

from comfy_airlock.host import web_dirs


def test_folders_come_in_comfyuis_order_and_injected_ones_only_from_inside_the_pack(
    tmp_path, caplog
):
    pack = tmp_path / "pack"
    for sub in ("web", "js", "other"):
        (pack / sub).mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    injected = {
        "Fixed-Name": str(pack / "js"),  # ComfyUI-Impact-Pack's shape
        "pack": str(pack / "other"),  # replaced by WEB_DIRECTORY, registered after it
        "Escape": str(outside),
        "Via-Dots": str(pack / ".." / "elsewhere"),
        "Gone": str(pack / "missing"),
    }
    with caplog.at_level(logging.WARNING, logger="comfy_airlock"):
        found = web_dirs.folders("pack", str(pack), "web", injected)
    assert [(d.name, d.path) for d in found] == [
        ("Fixed-Name", str(pack / "js")),
        ("pack", str(pack / "web")),
    ]
    refused = [r.getMessage() for r in caplog.records if "outside the pack's folder" in r.message]
    assert len(refused) == 2 and "'Escape'" in refused[0] and "'Via-Dots'" in refused[1]


def test_a_groups_members_are_served_each_under_its_own_name(tmp_path):
    """ADR 0054: each member's WEB_DIRECTORY under the member's folder name; a member that is a
    link to a pack elsewhere may inject a folder of its own."""
    group = tmp_path / "group"
    (group / "core" / "js").mkdir(parents=True)
    kept = tmp_path / "kept" / "extras"
    (kept / "web" / "fixed").mkdir(parents=True)
    (group / "extras").symlink_to(kept, target_is_directory=True)
    members = {"core": "./js", "extras": "web", "broken": None}
    injected = {"Extras-Fixed": str(group / "extras" / "web" / "fixed")}
    found = web_dirs.folders("group", str(group), None, injected, members)
    assert [(d.pack, d.name, d.path) for d in found] == [
        ("group", "Extras-Fixed", str(kept / "web" / "fixed")),
        ("group", "core", str(group / "core" / "js")),
        ("group", "extras", str(group / "extras" / "web")),
    ]
