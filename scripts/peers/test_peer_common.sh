#!/usr/bin/env bash
# CTest: the peers' max_rel_err (peer_common.rel_errors) is the course's, case for case as
# common/tests/test_common.cpp checks common/compare.cpp (numpy; PyTorch takes the same code path
# with torch's functions). Exits 77, "skipped", when no Python has numpy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import numpy' 2>/dev/null; then
    PYTHONPATH="$here" exec "$py" - <<'PY'
import math
import numpy as np
from peer_common import max_rel_err, rel_errors

ref = np.array([1.0, -2.0, 3.0, 0.0])
assert max_rel_err(ref.astype(np.float32), ref) == 0.0
x = ref.copy(); x[2] = 3.0 * (1 + 1e-3)
assert math.isclose(max_rel_err(x, ref), 1e-3, rel_tol=1e-9)       # relative to the element (3 > rms)
x[2] = math.nan; assert max_rel_err(x, ref) == math.inf              # NaN never passes
x[2] = math.inf; assert max_rel_err(x, ref) == math.inf
ref = np.array([0.0, 4.0, -4.0])                                      # a zero element: against the rms
x = np.array([1e-7, 4.0, -4.0])
assert math.isclose(max_rel_err(x, ref), 1e-7 / math.sqrt(32 / 3), rel_tol=1e-9)
ref = np.array([math.nan, 1.0])                                       # a NaN reference wants a NaN
assert max_rel_err(np.array([math.nan, 1.0]), ref) == 0.0
assert max_rel_err(np.array([0.0, 1.0]), ref) == math.inf
ref = np.array([math.inf, 1.0])
assert max_rel_err(np.array([math.inf, 1.0]), ref) == 0.0
assert max_rel_err(np.array([-math.inf, 1.0]), ref) == math.inf
assert max_rel_err(np.array([0.5, 0.0]), np.zeros(2)) == 0.5          # scale 0: the absolute error
ref = np.array([3.0, -4.0, 0.0, 0.0])                                 # rms 2.5
x = np.array([3.03, -4.0, 0.0, 0.0])
assert math.isclose(max_rel_err(x, ref), 0.01, rel_tol=1e-9)
assert math.isclose(max_rel_err(x, ref, "rms"), 0.03 / 2.5, rel_tol=1e-9)  # Scale::rms
x[2] = math.nan; assert max_rel_err(x, ref, "rms") == math.inf
e = rel_errors(np.array([[1.0, 2.5], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.0, 4.0]]))
assert e.shape == (2, 2) and int(e.argmax()) == 1
print("peer_common.max_rel_err: the course's measure, every case")
PY
  fi
done
echo "SKIP: no Python with numpy"
exit 77
