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
