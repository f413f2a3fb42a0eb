# A package, so that tests/comfyui/conftest.py does not shadow tests/conftest.py as the
# top-level module `conftest` (tests/test_supervisor.py imports from it), and so that test
# modules here may share basenames with tests/*.py. Import the harness relatively:
# `from .harness import ComfyUI`.
