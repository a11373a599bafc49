"""Build steps behind infra/aws/Makefile, which `sam build` runs (BuildMethod: makefile).

    build.py function SOURCE_DIR ARTIFACTS_DIR CONFIG_FILE
        A function package: SOURCE_DIR/*.py (the handlers), the dynagent package from
        shared/, and CONFIG_FILE's AWS pools as dynagent.yaml (the template's
        DYNAGENT_CONFIG). They are checked first with dynagent's own loader; GCP pools
        of the same file are left out, and named, for infra/gcp/deploy.sh.
    build.py layer ARTIFACTS_DIR PYTHON_VERSION PLATFORM...
        The dependency layer: requirements.txt as wheels for the Lambda runtime, under
        python/ (where Lambda puts a layer's Python packages on sys.path).

Standard library only: it runs under whatever Python runs SAM.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PACKAGE = ROOT / "shared" / "dynagent"
CONFIG_NAME = "dynagent.yaml"


def build_function(source: Path, artifacts: Path, config: Path) -> None:
    packed = check_config(config)
    handlers = sorted(source.glob("*.py"))
    if not handlers:
        sys.exit(f"build.py: no handler module (*.py) in {source}")
    artifacts.mkdir(parents=True, exist_ok=True)
    for handler in handlers:
        shutil.copy2(handler, artifacts / handler.name)
    target = artifacts / "dynagent"
    if target.exists():
        shutil.rmtree(target)
    # The other cloud's adapter, the local clouds, the demo, the simulator and the bridge never run
    # in a Lambda: leave them out of the package.
    unused = ("gcp", "testing", "demo", "simulate", "bridge")
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *unused))
    if packed is None:
        shutil.copy2(config, artifacts / CONFIG_NAME)
    else:
        (artifacts / CONFIG_NAME).write_text(packed)
    print(f"build.py: {', '.join(h.name for h in handlers)} + dynagent + {config} -> {artifacts}")


def check_config(config: Path) -> str | None:
    """Load the config's AWS pools as the functions will, failing the build on an error
    there; return the config to pack (None: the file as it is, unchecked)."""
    if not config.is_file():
        sys.exit(f"build.py: config file {config} not found (set DYNAGENT_CONFIG_FILE)")
    sys.path.insert(0, str(PACKAGE.parent))
    try:
        from dynagent.core.config import AwsProvider, ConfigError
        from dynagent.files.packed import describe_left, pack_config
    except ImportError as error:
        # Only when SAM's Python lacks pydantic/PyYAML (`make sam` always has them).
        print(f"build.py: WARNING: config not checked ({error})", file=sys.stderr)
        return None
    try:
        packed = pack_config(config, "aws")
    except ConfigError as error:
        sys.exit(f"build.py: {error}")
    providers = [p.provider for p in packed.config.pools.values()]
    pairs = sorted({(p.tag_key, p.tag_value) for p in providers if isinstance(p, AwsProvider)})
    if len(pairs) != 1:
        listed = ", ".join(f"{key}={value}" for key, value in pairs)
        sys.exit(
            f"build.py: {config}: pools use different managed tag pairs ({listed}); "
            "the stack's IAM policy allows exactly one (ManagedTagKey/ManagedTagValue)"
        )
    key, value = pairs[0]
    print(
        f"build.py: {config}: AWS pool(s) {', '.join(packed.config.pools)}, managed tag "
        f"{key}={value}; deploy with ManagedTagKey={key} ManagedTagValue={value}"
    )
    if packed.left:
        print(f"build.py: {config}: {describe_left(packed.left)}")
    return packed.text


def build_layer(artifacts: Path, python_version: str, platforms: list[str]) -> None:
    target = artifacts / "python"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-compile", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", python_version,
        *[arg for platform in platforms for arg in ("--platform", platform)],
        "--target", str(target), "--upgrade", "-r", str(HERE / "requirements.txt"),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    # Console scripts are of no use in a layer, and name the build machine's Python.
    shutil.rmtree(target / "bin", ignore_errors=True)
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    print(f"build.py: requirements.txt for CPython {python_version} ({platforms[0]}) -> {target}")


def main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[0] == "function":
        build_function(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    elif len(argv) >= 4 and argv[0] == "layer":
        build_layer(Path(argv[1]), argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
