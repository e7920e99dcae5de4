"""Fetch the Kafka broker's runtime jars with Maven, once, into ``<project>/.inferq/kafka/jars``.

The jar list is defined by ``infra/kafka/pom.xml``. A stamp file records the pom's hash and the jars it
produced, so an edited pom or a half-deleted folder triggers a fresh download and nothing else does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferq.tools.broker.errors import JarFetchError, ToolMissingError

MIN_JAVA_MAJOR = 17
# Maven 3.8's default dependency plugin (2.8) predates features we rely on: name a current one.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

INFRA_DIR = Path("infra") / "kafka"
STATE_DIR = Path(".inferq") / "kafka"
STAMP_NAME = ".inferq-jars.json"

_JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')
_LOCK_WAIT_S = 900.0  # another process may be running the (cold) Maven download right now
_OUTPUT_TAIL_LINES = 40


def pom_path(project_root: Path) -> Path:
    """The pom listing the broker's jars."""
    return project_root / INFRA_DIR / "pom.xml"


def log4j_config_path(project_root: Path) -> Path:
    """The broker's log4j2 configuration (logs to ``${sys:kafka.logs.dir}/server.log``)."""
    return project_root / INFRA_DIR / "log4j2.properties"


def jars_dir(project_root: Path) -> Path:
    """Where ``ensure_jars`` puts the jars (under the git-ignored ``.inferq/``)."""
    return project_root / STATE_DIR / "jars"


def _tail(text: str, lines: int = _OUTPUT_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def require_java(min_major: int = MIN_JAVA_MAJOR) -> str:
    """Return the path of a ``java`` of at least ``min_major``; honours ``JAVA_HOME`` first, then PATH.

    Raises ToolMissingError naming the package to install when none is found or it is too old.
    """
    install = "install it with `apt-get install -y openjdk-17-jre-headless`"
    java_home = os.environ.get("JAVA_HOME")
    java: str | None = None
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        java = str(Path(java_home) / "bin" / "java")
    else:
        java = shutil.which("java")
    if java is None:
        raise ToolMissingError(f"Java {min_major}+ not found on PATH: {install}")
    try:
        # `java -version` prints to stderr, e.g. `openjdk version "17.0.15" 2025-04-15`.
        proc = subprocess.run(  # noqa: S603 - fixed argv, resolved executable
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolMissingError(f"{java} -version failed ({exc}): {install}") from exc
    match = _JAVA_VERSION_RE.search(proc.stderr + proc.stdout)
    if match is None:
        raise ToolMissingError(f"cannot read the version of {java}: {install}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # pre-9 numbering: "1.8.0_392" is Java 8
        major = int(match.group(2))
    if major < min_major:
        raise ToolMissingError(f"Java {min_major}+ required but {java} is Java {major}: {install}")
    return java


def require_maven() -> str:
    """Return the path of ``mvn``; raises ToolMissingError saying how to install Maven when missing."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ToolMissingError("Maven not found on PATH: install it with `apt-get install -y maven`")
    return mvn


def _pom_hash(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def _jars_complete(target: Path, pom_hash: str) -> bool:
    stamp = target / STAMP_NAME
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("pom_sha256") != pom_hash:
        return False
    names = recorded.get("jars")
    if not isinstance(names, list) or not names:
        return False
    return all(isinstance(name, str) and (target / name).is_file() for name in names)


@contextmanager
def _exclusive_lock(lock_file: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive flock so parallel test workers do not run Maven into the same folder."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with lock_file.open("a+") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise JarFetchError(
                        f"timed out after {timeout_s:.0f}s waiting for {lock_file} (another jar download?)"
                    ) from None
                time.sleep(0.2)  # polling a non-blocking lock under a deadline: flock has no timeout
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_jars(project_root: Path, *, timeout_s: float = 900.0) -> Path:
    """Return ``<project_root>/.inferq/kafka/jars``, fetching the broker's jars with Maven when needed.

    Raises ToolMissingError (no java/mvn) or JarFetchError (Maven failed or timed out).
    """
    project_root = project_root.resolve()
    return ensure_jars_of(pom_path(project_root), jars_dir(project_root), "Kafka", timeout_s=timeout_s)


def ensure_jars_of(pom: Path, target: Path, what: str, *, timeout_s: float = 900.0) -> Path:
    """Return `target` holding the runtime jars `pom` lists, running Maven only when needed.

    Needed means: no stamp, a stamp for another pom hash, or a recorded jar missing. The download goes
    to a scratch folder that replaces the old one only when Maven succeeded, so a failed or interrupted
    fetch never leaves a half folder that looks complete. `what` names the jars in errors. Raises
    ToolMissingError (no java/mvn) or JarFetchError (Maven failed or timed out).
    """
    pom_hash = _pom_hash(pom)
    if _jars_complete(target, pom_hash):
        return target
    with _exclusive_lock(target.parent / f"{target.name}.lock", _LOCK_WAIT_S):
        if _jars_complete(target, pom_hash):  # another process fetched them while we waited
            return target
        require_java()  # Maven itself needs Java; fail with the install hint, not a Maven stack trace
        mvn = require_maven()
        scratch = target.parent / f"{target.name}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        argv = [
            mvn,
            "-B",
            "-q",
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={scratch}",
        ]
        try:
            proc = subprocess.run(  # noqa: S603 - fixed argv, resolved executable
                argv,
                cwd=pom.parent,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(
                f"Maven did not finish fetching the {what} jars within {timeout_s:.0f}s"
            ) from exc
        names = sorted(p.name for p in scratch.glob("*.jar")) if scratch.is_dir() else []
        if proc.returncode != 0 or not names:
            raise JarFetchError(
                f"`{' '.join(argv)}` failed (exit {proc.returncode}, {len(names)} jars) in "
                f"{pom.parent}:\n{_tail(proc.stdout + proc.stderr)}"
            )
        (scratch / STAMP_NAME).write_text(
            json.dumps({"pom_sha256": pom_hash, "jars": names}, indent=1), encoding="utf-8"
        )
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    return target
