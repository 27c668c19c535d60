"""The built wheel carries hw/ and sim/ inside the hwc namespace, and the target YAMLs."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_imports_hw_sim_and_targets(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info",
                                                             "__pycache__", ".cache", "out"))
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(tmp_path / "dist"),
                    str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("hwc_compiler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hwc/hw/__init__.py" in names and "hwc/sim/__init__.py" in names
    assert "hwc/targets/ref.yaml" in names
    assert not any(n.startswith(("hw/", "sim/", "targets/")) for n in names), "generic top-level modules"
    # Every source file of the checkout is in the wheel (packages are listed explicitly).
    mapping = {"hwc": "hwc", "hw": "hwc/hw", "sim": "hwc/sim", "targets": "hwc/targets"}
    for folder, dest in mapping.items():
        for f in (ROOT / folder).rglob("*"):
            if f.suffix in (".py", ".yaml") and "__pycache__" not in f.parts:
                rel = f.relative_to(ROOT / folder).as_posix()
                assert f"{dest}/{rel}" in names, f"{folder}/{rel} is missing from the wheel: list its package"
    # A pure-Python wheel is importable straight from the zip: import from it, not the checkout.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import hwc, hwc.hw, hwc.sim; "
            "from hwc.targets import load_target; assert hwc.__file__.startswith(sys.argv[1]), hwc.__file__; "
            "assert hwc.hw.__file__.startswith(sys.argv[1]); print(load_target('ref')['kind'])")
    r = subprocess.run([sys.executable, "-c", code, str(wheel)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ref"
