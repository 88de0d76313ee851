"""A recorded nvidia-smi: an executable that prints a recorded `--query-gpu` output."""

from __future__ import annotations

import stat
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def fake_nvidia_smi(tmp_path: Path, recording: str | None) -> str:
    """An executable that prints a recorded `nvidia-smi --query-gpu=...` output."""
    script = tmp_path / "nvidia-smi"
    if recording is None:
        script.write_text(
            "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
        )
    else:
        script.write_text(f"#!/bin/sh\ncat {DATA / recording}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)
