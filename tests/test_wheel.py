"""The package as an app gets it: a wheel built from this checkout, installed into a fresh virtual environment
without torch (or anything else), prices from its packaged coefficients; the console script names the extra."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from vaemem import estimate as est

ROOT = Path(__file__).parent.parent
REQUESTS = [("sd15", "decode", 512, 512, 1, None, "fp32", "onednn", "glibc-fixed"),
            ("wan21", "decode", 832, 480, 81, None, "bf16", "cudnn", "native"),
            ("flux1", "encode", 1024, 1024, 1, 512, "fp16", "miopen", "expandable")]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """A fresh virtual environment holding only the vaemem wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # build from a copy: setuptools writes build/ and *.egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "vaemem", src / "vaemem", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(src)], check=True, capture_output=True, text=True)
    (wheel,) = (tmp / "dist").glob("vaemem-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)
    return py


def test_the_wheel_prices_from_its_packaged_file_without_torch(fresh):
    code = (
        "import json, sys\n"
        "import vaemem.estimate as est\n"
        "out = [est.working_memory_bytes(m, op, w, h, frames=f, tile=t, dtype=d, backend=b, allocator=a, "
        "os='linux') for m, op, w, h, f, t, d, b, a in json.loads(sys.argv[1])]\n"
        "third = sorted(n.split('.')[0] for n in sys.modules if n.split('.')[0] in "
        "('torch', 'numpy', 'diffusers', 'typer', 'pandas', 'scipy'))\n"
        "print(json.dumps({'bytes': out, 'path': est.default_coefficients_path(), 'third_party': third}))\n")
    res = subprocess.run([str(fresh), "-I", "-c", code, json.dumps(REQUESTS)], capture_output=True, text=True,
                         check=True)
    got = json.loads(res.stdout)
    assert "site-packages" in got["path"] and got["third_party"] == []
    assert got["bytes"] == [est.working_memory_bytes(m, op, w, h, frames=f, tile=t, dtype=d, backend=b, allocator=a,
                                                     os="linux", coefficients=ROOT / "vaemem" / "coefficients.json")
                            for m, op, w, h, f, t, d, b, a in REQUESTS]
    no_torch = subprocess.run([str(fresh), "-I", "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr


def test_the_console_script_names_the_extra_when_the_toolkit_is_missing(fresh):
    script = fresh.parent / ("vaemem.exe" if sys.platform == "win32" else "vaemem")
    res = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert res.returncode == 2 and "pip install 'vaemem[measure]'" in res.stderr and "Traceback" not in res.stderr
    for command in ([str(script)], [str(fresh), "-m", "vaemem"]):  # python -m vaemem is the same entry
        version = subprocess.run([*command, "--version"], capture_output=True, text=True, check=True)
        assert version.stdout.strip() == f"vaemem {__import__('vaemem').__version__}"
