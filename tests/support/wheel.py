"""The package as a user installs it: an sdist and a wheel built from the checkout (``python -m build``, the wheel
built from the sdist), the wheel installed into a fresh virtual environment that cannot see the checkout, run from
a folder outside it.

The fresh environment takes the package's dependencies from this one's site-packages (a path entry, not a site
folder: this environment's editable install of the checkout is not activated there), so installing it downloads
nothing; ``pip check`` then holds the wheel's declared requirements to what is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

# What a build needs from the checkout (MANIFEST.in says what the sdist holds; the wheel is built from it).
BUILD_INPUTS = ("pyproject.toml", "MANIFEST.in", "README.md", "build_support", "sql", "dagster_databus")


@dataclass(frozen=True)
class InstalledWheel:
    venv: Path
    sdist: Path
    wheel: Path
    numba_cache: Path  # its runs' NUMBA_CACHE_DIR, empty until ``warm`` runs (as a new machine's)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def command(self, name: str) -> Path:
        """A console script the wheel installed (``databus``)."""
        return self.venv / "bin" / name

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a user's shell would give it: no PYTHONPATH, this venv first on PATH."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return {**env, "PATH": f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                "NUMBA_CACHE_DIR": str(self.numba_cache), **extra}

    def run(self, args: list[str], cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=cwd, env=self.env(**env), capture_output=True, text=True, timeout=timeout)

    def adopt_script(self, name: str) -> Path:
        """A console script of a tool this environment takes from the test environment's packages (``dg``,
        ``create-dagster``), made to run on this environment's Python, as it would if installed here."""
        script = Path(sys.executable).parent / name
        lines = script.read_text().splitlines()
        target = self.venv / "bin" / name
        target.write_text("\n".join([f"#!{self.python}", *lines[1:]]) + "\n")
        target.chmod(0o755)
        return target


def build_and_install(folder: Path) -> InstalledWheel:
    """Build the sdist and the wheel from a copy of the checkout's build inputs, and install the wheel into a fresh
    virtual environment in ``folder``."""
    source = folder / "source"
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nb[ic]"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, source / name)
    dist = folder / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)],
                           capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = InstalledWheel(venv, sdist, wheel, folder / "numba-cache")
    purelib = subprocess.run([str(installed.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "databus_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for args in (["install", "--quiet", "--no-deps", "--ignore-installed", str(wheel)], ["check"]):
        done = installed.run([str(installed.python), "-m", "pip", *args], cwd=folder)
        if done.returncode != 0:
            raise RuntimeError(f"pip {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return installed


def warm(installed: InstalledWheel, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``databus warm --no-spark``, as docs/deployment.md's image build runs it after ``pip install``."""
    return installed.run([str(installed.command("databus")), "warm", "--no-spark"], cwd=cwd)
