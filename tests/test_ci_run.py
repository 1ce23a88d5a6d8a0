""".ci/run's test stage, with a stand-in ``python`` on PATH (no install, linter or test really runs): the README's
test command in two lanes side by side (``-m "not slow"`` after the EasyEdit tests, then the slow tests of a few
files; ``-m slow`` without those files; one thread each), every run's output printed, and any failing run failing
CI."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = r"""#!/usr/bin/env bash
# Stand-in for python in .ci/run: install, ruff and the venv builder succeed; a pytest run prints what it was given
# and exits with $FAKE_RC_<run>. The two halves of the main suite each wait for the other to have started.
dir="$FAKE_DIR"
case "$*" in
  *easyedit_env.py*) echo "$0"; exit 0 ;;
  *"-m pytest"*"-m easyedit"*) run=easyedit ;;
  *"-m pytest"*"-m not slow"*) run=fast; other=slow ;;
  *"-m pytest"*"-m slow"*"--ignore="*) run=slow; other=fast ;;
  *"-m pytest"*"-m slow"*) run=slow1 ;;
  *"-m pytest"*) run=whole ;;
  *) exit 0 ;;
esac
echo "$run" >>"$dir/runs"
if [ -n "${FAKE_SLEEP:-}" ]; then echo $$ >>"$dir/pids"; sleep "$FAKE_SLEEP"; fi
echo "output of the $run run: args [$*] threads ${OMP_NUM_THREADS:-unset} easyedit ${EASYEDIT_PATH:-unset}" \
     "require ${ZEROUNLEARN_REQUIRE_EASYEDIT:-unset}"
if [ -n "${other:-}" ]; then
  touch "$dir/started.$run"
  for _ in $(seq 200); do [ -e "$dir/started.$other" ] && break; sleep 0.05; done
  [ -e "$dir/started.$other" ] || { echo "the $other half did not run alongside"; exit 9; }
fi
rc_var="FAKE_RC_$run"
exit "${!rc_var:-0}"
"""


def run_ci(tmp_path: Path, **rcs: int) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON, encoding="utf-8")
    fake.chmod(0o755)
    easyedit = tmp_path / "EasyEdit"
    easyedit.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
           "EASYEDIT_PATH": str(easyedit), **{f"FAKE_RC_{k}": str(v) for k, v in rcs.items()}}
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=120)


def test_ci_runs_the_readme_command_in_two_halves_side_by_side(tmp_path):
    proc = run_ci(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted((tmp_path / "runs").read_text().split()) == ["easyedit", "fast", "slow", "slow1"]
    out = proc.stdout
    for run in ("easyedit", "fast", "slow", "slow1"):
        assert f"output of the {run} run" in out
    # the halves: exactly `python -m pytest -q` split on the slow marker, one thread, EasyEdit not importable
    assert "args [-m pytest -q -m not slow -p no:cacheprovider] threads 1 easyedit unset" in out
    # the slow half split by file: lane 1 runs the slow tests of FILES, lane 2 every other slow test (--ignore FILES)
    lane1 = re.search(r"output of the slow1 run: args \[-m pytest -q -m slow -p no:cacheprovider (.+?)\] threads 1 "
                      r"easyedit unset", out)
    lane2 = re.search(r"output of the slow run: args \[-m pytest -q -m slow -p no:cacheprovider (.+?)\] threads 1 "
                      r"easyedit unset", out)
    assert lane1 and lane2, out
    files = lane1.group(1).split()
    assert files and all((ROOT / f).is_file() and f.startswith("tests/") for f in files)
    assert lane2.group(1).split() == [f"--ignore={f}" for f in files]
    assert f"easyedit {tmp_path / 'EasyEdit'} require 1" in out


@pytest.mark.parametrize("failing", ["easyedit", "fast", "slow1", "slow"])
def test_any_failing_run_fails_ci_and_every_output_is_printed(tmp_path, failing):
    proc = run_ci(tmp_path, **{failing: 3})
    assert proc.returncode == 3
    assert f"{failing} tests: exit status 3" in proc.stdout
    for run in ("easyedit", "fast", "slow1", "slow"):
        assert f"output of the {run} run" in proc.stdout


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped yet has stopped running)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stopping_ci_stops_both_lanes_and_fails(tmp_path):
    """A CI job stopped on a timeout (SIGTERM) takes its two lanes with it: no test run is left running."""
    import signal
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON, encoding="utf-8")
    fake.chmod(0o755)
    (tmp_path / "EasyEdit").mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
           "EASYEDIT_PATH": str(tmp_path / "EasyEdit"), "FAKE_SLEEP": "60"}
    proc = subprocess.Popen(["bash", str(ROOT / ".ci" / "run")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    pids_file = tmp_path / "pids"
    deadline = time.time() + 30
    while time.time() < deadline and len(pids_file.read_text().split() if pids_file.exists() else []) < 2:
        time.sleep(0.1)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2  # the EasyEdit run and the slow half are running
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode != 0
    time.sleep(0.5)
    alive = [pid for pid in pids if _running(pid)]
    assert not alive, f"test runs left running: {alive}"
