"""Never imported: its environment cannot be built."""

raise RuntimeError("broken-env must never be imported")
