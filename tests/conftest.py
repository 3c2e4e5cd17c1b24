import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# tiny problems for harness tests, visible to worker processes too
sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
os.environ["EKB_PROBLEM_MODULES"] = "ekb_test_problems"


@pytest.fixture
def quick_timing():
    from edgekernelbench.harness.timing import TimingConfig

    return TimingConfig.quick()
