"""A recorded nvidia-smi: an executable that prints a recorded `--query-gpu` output, and for `topo -m` the
recorded link matrix beside it (`<name>.topo`, nvidia-smi's tab-separated format with its legend)."""

from __future__ import annotations

import stat
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def fake_nvidia_smi(tmp_path: Path, recording: str | None, topology: str | None = "recorded") -> str:
    """An executable that prints a recorded `nvidia-smi --query-gpu=...` output, and `topo -m`'s matrix.

    ``topology``: "recorded" prints the recording's `.topo` file (an error when it has none), None makes
    `topo -m` fail as a driver without it would, any other text is printed as the matrix.
    """
    script = tmp_path / "nvidia-smi"
    if recording is None:
        script.write_text(
            "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return str(script)
    matrix = DATA / Path(recording).with_suffix(".topo").name if topology == "recorded" else None
    if topology not in (None, "recorded"):
        matrix = tmp_path / "nvidia-smi-topo.txt"
        matrix.write_text(topology)
    topo = f"cat {matrix}" if matrix is not None and matrix.is_file() else "echo 'topo: not supported' >&2; exit 3"
    script.write_text(f'#!/bin/sh\nif [ "$1" = topo ]; then {topo}; exit; fi\ncat {DATA / recording}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)
