"""Every what-if notebook runs top to bottom and ends with an answer.

Each notebook in ``notebooks/`` opens with a parameter cell (its first code cell). The test
appends smaller values to that cell so that the run is short. It then executes the notebook in
a fresh ``python3`` kernel, with the repository root as the working directory, and checks that no
cell raised and that the last cell printed a ``Recommendation:`` line.
"""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat
import pytest

from tests.support import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))

# Appended to the parameter cell: two minutes of trace instead of ten keeps each run short.
SHORT_RUN = {"DURATION_S": "120"}


def _shrink_parameters(nb) -> None:
    cell = next(c for c in nb.cells if c.cell_type == "code")
    names = [name for name in SHORT_RUN if f"{name} =" in cell.source]
    assert names, "the first code cell should be the parameter cell (it sets DURATION_S)"
    cell.source += "\n# test overrides\n" + "".join(f"{n} = {SHORT_RUN[n]}\n" for n in names)


def _text(output) -> str:
    if output.output_type == "stream":
        return output.text
    return output.get("data", {}).get("text/plain", "")


def test_some_notebooks_exist():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path):
    nb = nbformat.read(path, as_version=4)
    _shrink_parameters(nb)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO_ROOT)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code_cells for o in c.outputs if o.output_type == "error"]
    assert not errors, [f"{o.ename}: {o.evalue}" for o in errors]
    last = "".join(_text(o) for o in code_cells[-1].outputs)
    assert any(line.startswith("Recommendation: ") for line in last.splitlines()), last
