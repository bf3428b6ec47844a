"""The test run's own rules, checked: nothing downloads (in the run or in the fresh processes it
starts), and a skipped test fails instead of hiding (the README installs every extra)."""

import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT, fresh_process_environment

FETCH = """
import urllib.request
try:
    urllib.request.urlopen("https://pypi.org/simple/", timeout=20)
    print("downloaded")
except OSError as error:
    print("refused:", error)
"""


def test_a_fresh_process_cannot_download():
    """The package registry is reachable from this machine, yet a fresh process of the test run
    gets a refusal from the closed proxy port (on a machine without a network, a refusal too)."""
    result = subprocess.run(
        [sys.executable, "-c", FETCH],
        env=fresh_process_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused:") and "Connection refused" in result.stdout


def test_a_skipped_test_fails(tmp_path):
    """A test that calls ``pytest.skip`` (as a missing extra would) fails the run, named."""
    (tmp_path / "test_skipping.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_skips():
                pytest.skip("the extra is not installed")

            def test_passes():
                pass
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
        + ["-q", str(tmp_path / "test_skipping.py")],
        cwd=REPO_ROOT,
        env=fresh_process_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    assert "1 failed, 1 passed" in result.stdout
    assert "FAILED" in result.stdout and "test_skips" in result.stdout
