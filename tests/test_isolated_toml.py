"""The airlock.toml ``airlock isolate`` wrote, kept in step with an updated pack's requirements
(``isolated_toml``, ADR 0059), on real files: the user's edits, what isolate added for an
undeclared import, a group, a record from before the rule. The whole path with a real isolate
and a rebuilt environment is in test_isolate.py."""

from __future__ import annotations

import json
from pathlib import Path

import tomllib

from comfy_airlock import isolated_toml, pack_requirements


def isolated(tmp_path: Path, requirements: str, added: dict[str, str] | None = None) -> Path:
    """A pack folder as ``airlock isolate`` leaves it."""
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "requirements.txt").write_text(requirements)
    needs = pack_requirements.read_pack_needs(pack)
    wrote = isolated_toml.write_toml(pack, "pack", needs, added or {})
    marker = {"airlock_toml_sha256": wrote, "made_isolated_nodes": False, "added": added or {}}
    isolated_toml.write_marker(pack, marker)
    return pack


def deps(pack: Path) -> list[str]:
    return tomllib.loads((pack / "airlock.toml").read_text())["dependencies"]


def test_changes_compares_requirements_as_the_pack_lists_them():
    assert isolated_toml.changes(["six", "Numpy < 2"], ["numpy<2", "idna"]) == (["idna"], ["six"])
    assert isolated_toml.changes([], []) == ([], [])


def test_what_isolate_added_for_an_undeclared_import_stays(tmp_path):
    pack = isolated(tmp_path, "six\n", {"iniconfig": "iniconfig==2.0.0"})
    (pack / "requirements.txt").write_text("six\nidna\n")
    [notice], rewritten = isolated_toml.refresh(pack, "pack")
    assert rewritten
    assert "(now also idna)" in notice
    assert deps(pack) == ["six", "idna", "iniconfig==2.0.0"]
    assert "#   iniconfig==2.0.0 (imported as iniconfig)" in (pack / "airlock.toml").read_text()


def test_a_record_from_before_the_rule_reads_the_added_ones_from_the_header(tmp_path):
    pack = isolated(tmp_path, "six\n", {"iniconfig": "iniconfig==2.0.0"})
    marker = json.loads((pack / isolated_toml.MARKER).read_text())
    del marker["added"]  # isolate recorded only the hash before ADR 0059
    isolated_toml.write_marker(pack, marker)
    assert isolated_toml.refresh(pack, "pack") == ([], False)
    (pack / "requirements.txt").write_text("idna\n")
    [notice], rewritten = isolated_toml.refresh(pack, "pack")
    assert rewritten
    assert "(now also idna; no longer six)" in notice
    assert deps(pack) == ["idna", "iniconfig==2.0.0"]
    marker = json.loads((pack / isolated_toml.MARKER).read_text())
    assert marker["added"] == {"iniconfig": "iniconfig==2.0.0"}
    assert marker["airlock_toml_sha256"] == isolated_toml.sha(pack / "airlock.toml")


def test_an_edited_file_is_left_as_it_is_and_what_it_lacks_is_named(tmp_path):
    pack = isolated(tmp_path, "six\n")
    edited = (pack / "airlock.toml").read_text() + 'python = "3.11"\n'
    (pack / "airlock.toml").write_text(edited)
    assert isolated_toml.refresh(pack, "pack") == ([], False)  # edited, but the pack asks the same
    (pack / "requirements.txt").write_text("six\nidna\n")
    [notice], rewritten = isolated_toml.refresh(pack, "pack")
    assert not rewritten  # edited: left as it is
    assert "ask for idna, which" in notice and "you edited that file" in notice
    assert (pack / "airlock.toml").read_text() == edited
    (pack / "requirements.txt").write_text("")  # asks for less: nothing to add, nothing said
    assert isolated_toml.refresh(pack, "pack") == ([], False)


def test_a_groups_file_follows_its_members(tmp_path):
    group = tmp_path / "ab"
    for member, reqs in (("a", "six\n"), ("b", "idna\n")):
        (group / member).mkdir(parents=True)
        (group / member / "requirements.txt").write_text(reqs)
    needs = isolated_toml.group_needs(["a", "b"], [group / "a", group / "b"])
    wrote = isolated_toml.write_toml(group, "ab", needs, {})
    marker = {"airlock_toml_sha256": wrote, "group": ["a", "b"], "added": {}}
    isolated_toml.write_marker(group, marker)
    (group / "b" / "requirements.txt").write_text("idna\nsix>=1.16\n")
    [notice], rewritten = isolated_toml.refresh(group, "ab")
    assert rewritten
    assert "(now also six>=1.16)" in notice
    config = tomllib.loads((group / "airlock.toml").read_text())
    assert config["packs"] == ["a", "b"] and config["dependencies"] == ["six", "idna", "six>=1.16"]


def test_a_pack_isolate_wrote_nothing_for_is_left_alone(tmp_path):
    pack = tmp_path / "own"
    pack.mkdir()
    (pack / "airlock.toml").write_text('dependencies = ["six"]\n')
    (pack / "requirements.txt").write_text("idna\n")
    assert isolated_toml.refresh(pack, "own") == ([], False)  # no record: the pack's own config
    isolated_toml.write_marker(pack, {"airlock_toml_sha256": None, "made_isolated_nodes": False})
    assert isolated_toml.refresh(pack, "own") == ([], False)
    assert (pack / "airlock.toml").read_text() == 'dependencies = ["six"]\n'


def test_requirements_that_cannot_be_read_again_are_said_and_the_file_used(tmp_path):
    pack = isolated(tmp_path, "six\n")
    text = (pack / "airlock.toml").read_text()
    (pack / "requirements.txt").write_text("-e ./local\n")
    [notice], rewritten = isolated_toml.refresh(pack, "pack")
    assert not rewritten
    assert "cannot be read again" in notice and "is used as it is" in notice
    assert (pack / "airlock.toml").read_text() == text
