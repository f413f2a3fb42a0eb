"""Reading a custom_nodes/ pack's requirements.txt and pyproject.toml into airlock.toml."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from comfy_airlock import env as airlock_env
from comfy_airlock.pack_requirements import RequirementsError, airlock_toml, read_pack_needs


def pack(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "pack"
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def test_requirements_txt_as_pip_reads_it(tmp_path):
    d = pack(
        tmp_path,
        {
            "requirements.txt": (
                "\ufeff# comment\n"
                "numpy<2  # inline comment\n"
                "opencv-python-headless>=4.8 \\\n"
                "    ; sys_platform == 'linux'\n"
                "--extra-index-url https://download.pytorch.org/whl/cu121\n"
                "-r extra/more.txt\n"
                "--prefer-binary\n"
                "\n"
                "Pillow==10.0.0 --hash=sha256:abc --hash=sha256:def\n"
                "git+https://github.com/someone/somelib@v1#egg=somelib\n"
            ),
            "extra/more.txt": "-f ../wheels\nscipy\nnumpy<2\n",
            "wheels/.keep": "",
        },
    )
    needs = read_pack_needs(d)
    assert needs.dependencies == [
        "numpy<2",
        "opencv-python-headless>=4.8 ; sys_platform == 'linux'",
        "scipy",
        "Pillow==10.0.0",
        "git+https://github.com/someone/somelib@v1#egg=somelib",
    ]
    assert needs.extra_index_urls == ["https://download.pytorch.org/whl/cu121"]
    assert needs.find_links == ["wheels"]
    assert needs.sources == ["requirements.txt", "extra/more.txt"]
    assert any("--prefer-binary" in n for n in needs.notes)


def test_requirements_txt_is_what_is_installed_and_pyproject_only_without_one(tmp_path):
    # As ComfyUI-Manager installs a pack: requirements.txt; what pyproject.toml declares
    # beyond it is named in a note, never installed (comfy_mtb declares a name no index has).
    both = pack(
        tmp_path / "both",
        {
            "requirements.txt": "six>=1.16\n",
            "pyproject.toml": '[project]\nname = "p"\ndependencies = ["Six >= 1.16", "idna"]\n',
        },
    )
    needs = read_pack_needs(both)
    assert needs.dependencies == ["six>=1.16"]
    assert needs.sources == ["requirements.txt"]
    assert any("also declares idna: left out" in n for n in needs.notes), needs.notes
    only = pack(
        tmp_path / "only",
        {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["six >= 1.16", "idna"]\n'},
    )
    needs = read_pack_needs(only)
    assert needs.dependencies == ["six >= 1.16", "idna"]
    assert needs.sources == ["pyproject.toml"]
    assert needs.notes == []


def test_written_airlock_toml_is_read_back_by_the_core(tmp_path):
    d = pack(
        tmp_path,
        {
            "requirements.txt": (
                'numpy<2; python_version < "3.12"\n-i https://example.org/simple\n'
                "--find-links wheels\n"
            ),
            "wheels/.keep": "",
        },
    )
    needs = read_pack_needs(d)
    text = airlock_toml(needs, "Written by a test.\n\nTwo lines.")
    assert tomllib.loads(text)["dependencies"] == ['numpy<2; python_version < "3.12"']
    (d / "airlock.toml").write_text(text)
    config = airlock_env.pack_config(d)
    assert config["dependencies"] == ['numpy<2; python_version < "3.12"']
    assert config["index_url"] == "https://example.org/simple"
    assert config["find_links"] == [str(d / "wheels")]  # the core resolves it in the pack


def test_no_requirements_means_an_empty_list(tmp_path):
    d = pack(tmp_path, {"__init__.py": ""})
    needs = read_pack_needs(d)
    assert needs.dependencies == [] and needs.sources == []
    assert tomllib.loads(airlock_toml(needs, "x"))["dependencies"] == []


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("-e .", "editable"),
        ("-c constraints.txt", "'-c' cannot be carried"),
        ("./wheels/mylib-1.0-py3-none-any.whl", "local path"),
        ("--find-links ../../elsewhere", "outside the pack"),
    ],
)
def test_what_airlock_toml_cannot_hold_is_an_error_naming_the_line(tmp_path, line, said):
    d = pack(tmp_path, {"requirements.txt": f"six\n{line}\n"})
    with pytest.raises(RequirementsError) as e:
        read_pack_needs(d)
    assert "requirements.txt, line 2" in str(e.value)
    assert said in str(e.value)


def test_a_broken_pyproject_is_an_error(tmp_path):
    d = pack(tmp_path, {"pyproject.toml": "[project\n"})
    with pytest.raises(RequirementsError, match=r"pyproject\.toml: cannot be read"):
        read_pack_needs(d)
