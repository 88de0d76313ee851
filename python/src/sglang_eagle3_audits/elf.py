"""The ELF scan of a wheel: the sonames its x86-64 shared objects and executables provide and need (pyelftools).

A module of its own so that the scan's cache (keyed by this module's code) outlives edits to the audit around it.
"""

from __future__ import annotations

import io
from pathlib import Path

from sglang_eagle3.errors import BadInput

from .base import MISSING_ELFTOOLS
from .closure import Contents, Scanner


def elf_libraries(contents: Contents) -> dict:
    """{"provides", "needs": sonames, "count": files} over the wheel's dynamic x86-64 ELF files."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
    except ImportError:
        raise BadInput(MISSING_ELFTOOLS) from None
    provides: set[str] = set()
    needs: set[str] = set()
    count = 0
    for name in contents.names:
        if name.endswith("/"):
            continue
        with contents.open(name) as member:
            if member.read(4) != b"\x7fELF":
                continue
        try:
            elf = ELFFile(io.BytesIO(contents.read(name, keep=False)))
        except ELFError:
            continue
        if elf["e_machine"] != "EM_X86_64":
            continue  # GPU code (cubins) are ELF too, but not for the host's loader
        dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
        if dynamic is None:
            continue
        count += 1
        provides.add(Path(name).name)
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_NEEDED":
                needs.add(tag.needed)
            elif tag.entry.d_tag == "DT_SONAME":
                provides.add(tag.soname)
    return {"provides": sorted(provides), "needs": sorted(needs), "count": count}


SCANNER = Scanner("elf-libraries", (__name__,), elf_libraries)
