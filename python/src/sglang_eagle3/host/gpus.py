"""The host's NVIDIA GPUs as nvidia-smi reports them: each GPU, and the links between them (``topo -m``).

Both are read by running nvidia-smi (SGLANG_EAGLE3_NVIDIA_SMI points the tests at recorded outputs).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

NVIDIA_SMI_ENV = "SGLANG_EAGLE3_NVIDIA_SMI"  # tests point this at recorded outputs
QUERY = ["--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader"]


@dataclass
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory: str


def _nvidia_smi(given: str | None) -> str | None:
    """The nvidia-smi to run: the one given, else $SGLANG_EAGLE3_NVIDIA_SMI, else the one on PATH (None: none)."""
    return given or os.environ.get(NVIDIA_SMI_ENV) or shutil.which("nvidia-smi")


def query_gpus(nvidia_smi: str | None = None) -> list[Gpu]:
    """GPUs as nvidia-smi reports them. Raises FileNotFoundError without a driver."""
    command = _nvidia_smi(nvidia_smi)
    if not command:
        raise FileNotFoundError("nvidia-smi")
    result = subprocess.run([command, *QUERY], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError((result.stderr or result.stdout).strip() or f"nvidia-smi exited {result.returncode}")
    gpus = []
    for row in csv.reader(line for line in result.stdout.splitlines() if line.strip()):
        index, name, cap, memory = (cell.strip() for cell in row)
        gpus.append(Gpu(int(index), name, cap, memory))
    return gpus


TOPO = ["topo", "-m"]
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nvidia-smi topo -m's legend: the PCIe paths; NV# is NVLink
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header row


@dataclass
class Topology:
    kind: str  # allreduce_gates.TOPOLOGIES: "nvlink" or "pcie"
    how: str  # what it was read from, for the report


def read_topology(text: str, count: int) -> Topology | None:
    """NVLink when every pair of GPU0..GPU<count-1> is NV# in ``nvidia-smi topo -m``'s matrix, else PCIe when each
    pair is NV# or a PCIe path (SGLang's custom all-reduce wants all pairs on NVLink); None when the matrix does not
    have those GPUs or a pair's link is none of the legend's."""
    links = _pair_links(text, count)
    if links is None:
        return None
    span, kinds = f"GPU0-GPU{count - 1}", sorted(set(links.values()))
    if all(link.startswith("NV") for link in kinds):
        return Topology("nvlink", f"nvidia-smi topo -m: every pair of {span} is {', '.join(kinds)}")
    if not any(link.startswith("NV") for link in kinds):
        return Topology("pcie", f"nvidia-smi topo -m: {span} over PCIe only ({', '.join(kinds)})")
    pcie = next(f"{a}-{b} {link}" for (a, b), link in links.items() if not link.startswith("NV"))
    return Topology("pcie", f"nvidia-smi topo -m: {span} over {', '.join(kinds)}, not all NVLink ({pcie})")


def _pair_links(text: str, count: int) -> dict[tuple[str, str], str] | None:
    """The matrix's link for each pair of GPU0..GPU<count-1>; None when a GPU is missing or a link is not known."""
    lines = [ANSI.sub("", line).split() for line in text.splitlines()]
    header = next((cells for cells in lines if cells[:1] == ["GPU0"]), None)
    if header is None or count < 2:
        return None
    columns = [name for name in header if re.fullmatch(r"(GPU|NIC)\d+", name)]
    rows = {cells[0]: dict(zip(columns, cells[1:], strict=False)) for cells in lines if cells}
    gpus = [f"GPU{i}" for i in range(count)]
    if any(g not in rows or g not in columns for g in gpus):
        return None
    links = {(a, b): rows[a].get(b, "") for i, a in enumerate(gpus) for b in gpus[i + 1 :]}
    known = all(re.fullmatch(r"NV\d+", link) or link in PCIE_PATHS for link in links.values())
    return links if known else None


def query_topology(nvidia_smi: str | None, count: int) -> Topology | None:
    """``read_topology`` of this host's ``nvidia-smi topo -m``; None when it cannot be run or read."""
    command = _nvidia_smi(nvidia_smi)
    if not command:
        return None
    try:
        result = subprocess.run([command, *TOPO], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return read_topology(result.stdout, count) if result.returncode == 0 else None


def device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """/dev/nvidia0, /dev/nvidia1, ... (not nvidiactl or nvidia-uvm)."""
    return sorted(p for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))
