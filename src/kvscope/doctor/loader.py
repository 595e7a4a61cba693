"""What the dynamic loader resolved: libraries mapped into a process and ``ldconfig`` entries.

``/proc/<pid>/maps`` lists every file mapped into a process; its path column is the file
actually opened (symlinks resolved), so two different ``libcuda`` files there means two
drivers' user-space halves are loaded into one process. Versions come from file names
(``libcuda.so.550.54.15`` carries the driver version, ``libnccl.so.2.21.5`` the NCCL
version); pip wheels ship ``libnccl.so.2`` whose name carries the major only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Library family -> pattern of its file name.
FAMILIES: dict[str, re.Pattern[str]] = {
    "libcuda": re.compile(r"^libcuda\.so(?:\.(?P<v>[\d.]+))?$"),
    "libcudart": re.compile(r"^libcudart\.so(?:\.(?P<v>[\d.]+))?$"),
    "libnccl": re.compile(r"^libnccl\.so(?:\.(?P<v>[\d.]+))?$"),
    "libnvidia-ml": re.compile(r"^libnvidia-ml\.so(?:\.(?P<v>[\d.]+))?$"),
}


@dataclass(frozen=True)
class LoadedLib:
    family: str
    path: str
    version: str | None  # from the file name; None when the name has no version

    @property
    def is_compat(self) -> bool:
        """A forward-compatibility libcuda (``cuda-compat`` installs it under ``.../compat/``)."""
        return "/compat/" in self.path

    @property
    def is_stub(self) -> bool:
        """The toolkit's link-time stub (``.../stubs/libcuda.so``), which cannot drive a GPU."""
        return "/stubs/" in self.path


def classify(path: str) -> LoadedLib | None:
    name = path.rsplit("/", 1)[-1]
    for fam, pat in FAMILIES.items():
        m = pat.match(name)
        if m:
            return LoadedLib(fam, path, m.group("v"))
    return None


def mapped_libraries(maps_text: str) -> dict[str, list[LoadedLib]]:
    """Distinct mapped files per library family, in first-mapped order."""
    seen: dict[str, list[LoadedLib]] = {f: [] for f in FAMILIES}
    paths: set[str] = set()
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip().removesuffix(" (deleted)")
        if not path.startswith("/") or path in paths:
            continue
        lib = classify(path)
        if lib is not None:
            paths.add(path)
            seen[lib.family].append(lib)
    return seen


def ldconfig_libraries(resolved: dict[str, str]) -> dict[str, list[LoadedLib]]:
    """``library_paths`` probe output (link -> real file) grouped by family."""
    out: dict[str, list[LoadedLib]] = {f: [] for f in FAMILIES}
    for link, real in sorted(resolved.items()):
        chosen = classify(real) or classify(link)
        if chosen is not None and all(x.path != chosen.path for x in out[chosen.family]):
            out[chosen.family].append(chosen)
    return out
