"""One settings object per process (comfy_airlock/settings.py): every ``AIRLOCK_*`` variable is
named in exactly one Python product module, each Rust-read one in one Rust module, and all of
them in the user guide's table, which is the one settings.py makes."""

from __future__ import annotations

import io
import logging
import re
import tokenize
from pathlib import Path

from comfy_airlock import settings

REPO = Path(__file__).resolve().parents[1]
PRODUCT = REPO / "python" / "comfy_airlock"
VARIABLE = re.compile(r"AIRLOCK_[A-Z0-9][A-Z0-9_]*")
# Names that look like variables and are not: a constant for the config file's name
# ("airlock.toml"), and the attribute that marks a proxy class with its pack.
NOT_VARIABLES = {"AIRLOCK_TOML", "AIRLOCK_PACK"}
# Rust variables named in more than one product module of crates/: none since the Rust half of
# issue 16 (ADR 0020); a name the core must spell in a second module goes here, with the reason.
RUST_SPREAD: dict[str, set[str]] = {}


_TEXT = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def python_names(path: Path) -> set[str]:
    """Variable names in a module's strings and comments (its code's names are identifiers)."""
    found = set()
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type in _TEXT:
                found.update(VARIABLE.findall(tok.string))
    return found - NOT_VARIABLES


def rust_names() -> dict[str, set[str]]:
    """Variable names in the product sources of crates/ (tests, examples and the `#[cfg(test)]`
    module at a file's end left out), by module."""
    out: dict[str, set[str]] = {}
    for path in sorted((REPO / "crates").glob("*/src/**/*.rs")):
        if path.name.endswith("tests.rs"):
            continue
        text = path.read_text().split("#[cfg(test)]")[0]
        for name in set(VARIABLE.findall(text)) - NOT_VARIABLES:
            out.setdefault(name, set()).add(str(path.relative_to(REPO / "crates")))
    return out


def guide_table() -> str:
    text = (REPO / "docs" / "user-guide.md").read_text()
    start, end = "<!-- settings table: python -m comfy_airlock.settings -->", "<!-- end -->"
    assert start in text, "the user guide lost its table of AIRLOCK_* variables"
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def test_each_variable_is_named_in_one_python_module():
    where: dict[str, list[str]] = {}
    for path in sorted(PRODUCT.rglob("*.py")):
        for name in python_names(path):
            where.setdefault(name, []).append(str(path.relative_to(PRODUCT)))
    spread = {n: w for n, w in where.items() if w != ["settings.py"]}
    assert not spread, f"AIRLOCK_* named outside settings.py (read it from there): {spread}"
    declared = set(settings.ENV.values()) | set(settings.RUST_ONLY)
    assert set(where) == declared


def test_each_rust_variable_is_in_one_rust_module_or_known():
    found = rust_names()
    declared = set(settings.ENV.values()) | set(settings.RUST_ONLY)
    assert set(found) <= declared, f"read by the core, not in settings.py: {set(found) - declared}"
    for name, (module, _, _) in settings.RUST_ONLY.items():
        assert name in found, f"{name} is listed as read by the core, which never names it"
        assert module in found[name], f"{name} is named in {found[name]}, not in {module}"
    spread = {n: w for n, w in found.items() if len(w) > 1}
    new = {n: w - RUST_SPREAD.get(n, set()) for n, w in spread.items()}
    assert not {n: w for n, w in new.items() if w}, f"named in more Rust modules: {new}"


def test_the_user_guide_table_is_the_one_settings_makes():
    table = guide_table()
    assert table == settings.reference_table(), (
        "docs/user-guide.md's table is stale: paste `python -m comfy_airlock.settings` into it"
    )
    for name in set(settings.ENV.values()) | set(settings.RUST_ONLY):
        assert f"`{name}`" in table


def test_values_parse_as_documented(caplog):
    env = {
        "AIRLOCK_IDLE_RELEASE_S": "off",
        "AIRLOCK_PRESSURE_FREE_MIB": "1.5",
        "AIRLOCK_HEARTBEAT_S": "0.2",
        "AIRLOCK_RESERVE": "no",
        "AIRLOCK_AUTO_BUILD": "",
        "AIRLOCK_SIM_GPU": "/a:/b:",
        "AIRLOCK_WORKER_ENV": "A, B_*",
        "AIRLOCK_HUNG_GRACE_S": "soon",
        "AIRLOCK_COMFY": '{"pack_name": "p"}',
    }
    with caplog.at_level(logging.ERROR, logger="comfy_airlock"):
        s = settings.Settings.from_env(env)
    assert s.idle_release_s is None
    assert s.pressure_free == int(1.5 * (1 << 20))  # MiB, not seconds
    assert s.heartbeat_s == 0.2 and not s.reserve and s.auto_build
    assert s.sim_gpu == ("/a", "/b") and s.worker_env == ("A", "B_*")
    assert s.hung_grace_s == 30.0 and "AIRLOCK_HUNG_GRACE_S='soon'" in caplog.text
    assert s.comfy == {"pack_name": "p"} and not s.worker
    assert settings.Settings.from_env({}) == settings.Settings()


def test_the_name_check_sees_strings_and_comments(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('X = "AIRLOCK_NEW_KNOB"  # and AIRLOCK_OTHER\nAIRLOCK_TOML = 1\n')
    assert python_names(src) == {"AIRLOCK_NEW_KNOB", "AIRLOCK_OTHER"}
    assert python_names(Path(io.__file__)) == set()
