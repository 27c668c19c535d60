"""`CpuArtifact`: what `hwc.build(..., target="cpu")` returns and `hwc.load` reads back.

Engines: `auto` runs the compiled model.o in this process (linked by gcc, called through
ctypes: the real compiled code); `reference` runs the same graph in the numpy reference
(float, or the int8 reference for an int8 build).
"""

from __future__ import annotations

from pathlib import Path

from hwc.artifact import Artifact, register
from hwc.backends.cpu.bundle import bundle_files
from hwc.backends.cpu.compiler import CpuBuild, compile_graph
from hwc.backends.cpu.target import CpuTarget
from hwc.errors import UserError
from hwc.ir.graph import Graph
from hwc.ir.serialize import load_graph

FILES = ("model.o", "weights.bin", "model.h", "main.c", "Makefile")


@register("cpu")
class CpuArtifact(Artifact):
    engines = ("auto", "reference")

    def __init__(self, target, graph, report=None, info=None, files: dict[str, bytes] | None = None):
        super().__init__(target, graph, report, info)
        self.files = files or {}
        self._native = None

    @property
    def native(self):
        """The loaded model (linked and opened on first use)."""
        if self._native is None:
            from hwc.backends.cpu.runner import NativeModel

            cpu = self.info["cpu"]
            if not cpu.get("host"):
                raise UserError(f"This build is for {cpu['triple']} (cpu {cpu['cpu']}), not for this machine: "
                                f"run model.o on that target (see main.c), or use --engine reference.")
            self._native = NativeModel(self.files["model.o"], self.info["entry_point"], self.files["weights.bin"],
                                       self.info["io"], self.info["sizes"], cpu["alignment"])
        return self._native

    def _run_one(self, feeds, engine):
        if engine == "reference":
            from hwc.ref.interp import run_graph

            return run_graph(self.graph, feeds)
        return self.native.run(feeds)

    def _write(self, folder: Path) -> None:
        super()._write(folder)
        for name in FILES:
            (folder / name).write_bytes(self.files[name])

    @classmethod
    def _read(cls, folder: Path, model: dict) -> CpuArtifact:
        import json

        report = json.loads((folder / "report.json").read_text())
        info = {k: v for k, v in model.items() if k not in ("hwc_version", "kind", "target", "inputs", "outputs")}
        missing = [f for f in FILES if not (folder / f).is_file()]
        if missing:
            raise UserError(f"{str(folder)!r} is a CPU build without {', '.join(missing)}; rebuild it with "
                            f"`hwc build MODEL --target cpu -o {folder}`.")
        files = {f: (folder / f).read_bytes() for f in FILES}
        return cls(model["target"], load_graph(folder), report, info, files)


def build_artifact(tgt: dict, graph: Graph, report: dict, info: dict, *, triple: str | None = None,
                   cpu: str | None = None) -> CpuArtifact:
    """Compile an optimized (or quantized) graph for a `kind: cpu` target."""
    target = CpuTarget.resolve(tgt, triple, cpu)
    build: CpuBuild = compile_graph(graph, target)
    io = build.io_spec()
    files = bundle_files(build.name, graph.name, io, build.sizes, target.as_dict(), build.compiled.object,
                         build.compiled.weights)
    report = {**report, **build.report(), "target": tgt["name"]}
    info = {**info, "entry_point": build.name, "io": io, "sizes": build.sizes, "cpu": target.as_dict()}
    return CpuArtifact(tgt, graph, report, info, files)
