"""Debian's Chromium, headless, for the plan page's browser test (``hack/system-packages.sh``).

Each call starts a fresh browser with its own profile directory and exits: ``dump_dom`` prints the
DOM after the page has loaded and laid out, ``screenshot`` writes a PNG of the viewport. Only
loopback or ``file://`` URLs are given to it, and everything that would reach the network on its own
(component updates, sync, background requests) is off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",  # runs as root in CI; the pages are the test's own
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def chromium_binary() -> str:
    """``$CHROMIUM_BIN``, else ``chromium`` on PATH; a RuntimeError saying how to install it."""
    for candidate in (os.environ.get("CHROMIUM_BIN"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("chromium not found: apt-get install chromium (hack/system-packages.sh integration)")


def _run(url: str, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    if not (url.startswith(("http://127.", "file://"))):
        raise ValueError(f"the browser test opens loopback or file URLs only, not {url}")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        done = subprocess.run(
            [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def dump_dom(url: str) -> str:
    """The page's DOM as Chromium holds it once loaded (``--dump-dom``)."""
    return _run(url, "--dump-dom").stdout


def screenshot(url: str, path: Path, width: int = 1150, height: int = 1500) -> Path:
    """A PNG of the first ``width`` x ``height`` pixels of the page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _run(url, f"--screenshot={path}", f"--window-size={width},{height}")
    if not path.is_file():
        raise RuntimeError(f"chromium wrote no screenshot at {path}")
    return path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
