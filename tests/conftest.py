import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# tiny problems for harness tests, visible to worker processes too
sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
os.environ["EKB_PROBLEM_MODULES"] = "ekb_test_problems"
# the run-store key (store.py) of this test process and the ekb processes it starts: never the user's own
_KEY_DIR = tempfile.mkdtemp(prefix="ekb-test-key-")
atexit.register(shutil.rmtree, _KEY_DIR, ignore_errors=True)
os.environ["EKB_STORE_KEY"] = os.path.join(_KEY_DIR, "store.key")


@pytest.fixture
def quick_timing():
    from edgekernelbench.harness.timing import TimingConfig

    return TimingConfig.quick()


@pytest.fixture(scope="session", autouse=True)
def _warm_judge_for_the_session():
    """The judgments a test makes in this process are forked from one warm judge per pytest worker
    (harness/zygote.py), as an episode's or `ekb eval`'s are: TVM imported once, not twice per judgment.
    Tests marked `fresh_workers` judge as a device's or a GPU's jobs are judged, by a fresh builder and
    judge per judgment (unless the test opens a warm judge of its own): the warm judge's own tests and
    the attacks on the sandbox of fresh workers."""
    from edgekernelbench.harness.isolation import warm_judge

    with warm_judge():
        yield


@pytest.fixture(autouse=True)
def _fresh_workers(request):
    if request.node.get_closest_marker("fresh_workers") is None:
        yield
        return
    from edgekernelbench.harness import isolation

    session, isolation._WARM.slot = isolation._WARM.slot, None  # outside the session's block
    try:
        yield
    finally:
        isolation._WARM.slot = session
